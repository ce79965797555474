//! Command-line interface (`sim run`, `sim sweep`, `sim merge`, `sim bench`).
//!
//! Exit codes: 0 success; 1 a check failed (an invariant under `--invariants`, or in any
//! sweep run); 2 bad input or any other error (one line on stderr naming the file, key path
//! and line).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use crate::check::golden::{Golden, Tolerance, compare, golden_path, load_metrics};
use crate::check::{CheckOptions, check_file, expand};
use crate::export::{Perf, write_all, write_json};
use crate::plot::save;
use crate::plot::series::BackendSeries;
use crate::report::render;
use crate::scenario::{Scenario, Source, load, parse_set};
use crate::sim::{RunOptions, SimError, run};
use crate::sweep::exec::{ExecOptions, PartialSink, execute, failure_error, owned_runs, shard_path, validate_points};
use crate::sweep::spec::{CliAxes, plan};
use crate::sweep::table::{self, SweepFile};
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
    /// Run one scenario and write out/<scenario>/{summary.json, requests.csv, ...}.
    ///
    /// Example: sim run scenarios/burst8.toml --set router.policy.fallback=leastinflight
    Run(RunArgs),
    /// Run a grid of scenario variants x seeds in parallel; write sweep.csv, sweep.json,
    /// aggregate.csv, aggregate.md and heatmap/line plots.
    ///
    /// Axes come from the scenario's [sweep] table and from -L/-P (which replace file axes
    /// of the same name). Points are the Cartesian product, first axis slowest; seeds vary
    /// fastest. Output is byte-identical for any --jobs and for --shard + sim merge.
    ///
    /// Example: sim sweep scenarios/burst8.toml -L router.policy.fallback qps,leastinflight
    ///          -P router.engine_stats_interval_s 1 10 -D 1 --seeds 20
    Sweep(Box<SweepArgs>),
    /// Combine `sim sweep --shard K/N` outputs into the files one unsharded sweep writes.
    ///
    /// Example: sim merge out/sweep-scrape-band/shards/*.json
    Merge(MergeArgs),
    /// Run scenarios and evaluate their [expect] bounds; print a pass/fail table, write
    /// JUnit XML; exit 1 if any bound fails, 2 on bad input.
    ///
    /// Example: sim check scenarios/ --determinism
    Check(CheckArgs),
    /// Compare two results (golden files, summary.json files, run folders, or sweep folders
    /// and sweep.json files point by point) metric by metric; exit 1 if any differs beyond
    /// the tolerance.
    ///
    /// Example: sim compare out/golden/burst8.json out/burst8 --rel-tol 0.01
    Compare(CompareArgs),
    /// Explain a run's stranded capacity in plain language: each worst episode (who idled,
    /// who queued), the decisions that caused it (branch, view and its age, truth), the
    /// sessions that stayed latched, and counterfactual re-runs on the same seed.
    ///
    /// The run is reproduced from RESULTS_DIR/scenario.toml (byte-identical by construction)
    /// and checked against RESULTS_DIR/summary.json; writes explain.md and explain.json there.
    ///
    /// Example: sim explain out/burst8 --policy '{ kind = "leastinflight", band = 0 }'
    Explain(ExplainArgs),
    /// List every routing policy: parameters with upstream defaults, the signals it reads
    /// and their freshness, and the upstream code it reproduces.
    Policies(PoliciesArgs),
    /// Measure simulator speed (events/s, requests/s) on a scenario; writes nothing unless
    /// --json is given.
    ///
    /// Example: sim bench scenarios/bench-10k.toml --runs 5
    Bench(BenchArgs),
    /// Inspect or convert request traces (native CSV, Mooncake JSONL, Azure 2023 CSV,
    /// BurstGPT CSV).
    ///
    /// Example: sim trace inspect traces/mooncake_conversation_sample.jsonl --json
    #[command(subcommand)]
    Trace(TraceCommand),
    /// Recommend a routing configuration for the scenario's fleet and traffic: successive
    /// halving over a space of policies and parameters on common seeds, a ranked table
    /// with 95% intervals, why the winner wins, the Pareto front, and the winner as TOML
    /// and router flags (docs/tune.md).
    ///
    /// Example: sim tune scenarios/burst8.toml --budget 400 --out out/tune-burst8
    Tune(Box<crate::tune::cli::TuneArgs>),
    /// List the model/GPU/TP profiles (`profile = "..."` in [[backends.groups]]): step-time
    /// coefficients, KV capacity derived as vLLM does, and each one's source and commit.
    ///
    /// Example: sim profiles --json
    Profiles(crate::profiles::ProfilesArgs),
    /// Write a commented scenario from a deployment's production-stack router flags, Helm
    /// values and `vllm serve` flags; each value's comment names the flag or key it came from.
    ///
    /// Example: sim import --router-args "--routing-logic prefixaware --static-backends
    ///          http://a:8000,http://b:8000 --static-models m,m" -o out/mine.toml
    Import(Box<crate::import::ImportArgs>),
}

#[derive(Subcommand, Debug)]
enum TraceCommand {
    /// Counts, span, rate, token distributions (p50/p90/p99/max), prefix sharing, inferred
    /// sessions and burstiness (most arrivals in any 1 s window); a table, or JSON.
    Inspect(TraceInspectArgs),
    /// Convert a trace to the native CSV (arrival_s,session_id,turn,input_tokens,
    /// output_tokens,block_ids), with sessions as the trace gives them or as inferred.
    ///
    /// Example: sim trace convert mooncake.jsonl --out trace.csv --sessions infer
    Convert(TraceConvertArgs),
    /// Parse a trace repeatedly and print the reader's throughput (rows/s).
    Bench(TraceBenchArgs),
}

#[derive(Args, Debug)]
struct TraceReadArgs {
    /// Trace file.
    file: PathBuf,
    /// Format: native, mooncake, azure, burstgpt, dynamo, otel or sessions (default:
    /// detected from the first line; sessions when --columns is given).
    #[arg(long)]
    format: Option<String>,
    /// Count and report malformed rows instead of failing on the first.
    #[arg(long)]
    skip_bad_rows: bool,
    /// Tokens per prefix block id (default: the trace's, Dynamo 16; else 512, Mooncake's).
    #[arg(long)]
    block_tokens: Option<u32>,
    /// Column mapping of a `sessions` log: KEY=COLUMN,... with the scenario's `columns`
    /// keys (e.g. session=conv,start_s=t,latency_s=dur,input_tokens=in,output_tokens=out).
    #[arg(long)]
    columns: Option<String>,
    /// OTel span attribute naming the session (repeatable; default gen_ai.conversation.id,
    /// then session.id, then the trace id).
    #[arg(long = "session-attribute")]
    session_attributes: Vec<String>,
}

#[derive(Args, Debug)]
struct TraceInspectArgs {
    #[command(flatten)]
    read: TraceReadArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct TraceConvertArgs {
    #[command(flatten)]
    read: TraceReadArgs,
    /// Output CSV file.
    #[arg(long)]
    out: PathBuf,
    /// Treat the trace argument as a results folder of `sim run` (requests.csv and
    /// scenario.toml): write its calls as a `sessions` CSV to --out and, next to it, a
    /// scenario (`<out stem>.toml`) that replays them closed-loop on the same fleet and router.
    #[arg(long)]
    from_run: bool,
    /// Sessions to write: auto (the trace's ids, else inferred from prefix blocks, else
    /// none), infer, none, synthesize (default: the trace's own ids, else none).
    #[arg(long)]
    sessions: Option<String>,
    /// Seed for --sessions synthesize.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Args, Debug)]
struct TraceBenchArgs {
    #[command(flatten)]
    read: TraceReadArgs,
    /// Timed parses (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: u32,
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
    /// Results folder (default: out/<scenario name>, an ignored folder).
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
    /// Also store a compact golden summary (flattened metrics) as DIR/<scenario>.json,
    /// for `sim compare` (DIR defaults to out/golden).
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = "out/golden")]
    save_golden: Option<PathBuf>,
    /// Also explain the stranded capacity (as `sim explain` does) and write explain.md/json.
    #[arg(long)]
    explain: bool,
    /// Also write timeline.json: every request's queued, prefill and decode phases per
    /// backend in Chrome trace event format (open in https://ui.perfetto.dev).
    #[arg(long)]
    timeline: bool,
    #[command(flatten)]
    explain_opts: ExplainFlags,
    #[command(flatten)]
    plot: crate::plot::PlotArgs,
}

#[derive(Args, Debug, Clone)]
struct ExplainFlags {
    /// Counterfactual policy, a TOML table as in [router.policy] (repeatable; default:
    /// { kind = "least_request" }). A fresh-signals re-run of the scenario's own policy is
    /// always included.
    #[arg(long = "policy", value_name = "TOML")]
    policies: Vec<String>,
    /// Skip the counterfactual re-runs.
    #[arg(long)]
    no_counterfactual: bool,
    /// Explain at most this many episodes (the worst ones).
    #[arg(long, default_value_t = 3)]
    episodes: usize,
    /// Merge episodes closer than this many seconds.
    #[arg(long, default_value_t = 2.0)]
    merge_gap_s: f64,
    /// Count a view as stale beyond this age in seconds (default: the scrape interval).
    #[arg(long)]
    stale_after_s: Option<f64>,
}

#[derive(Args, Debug)]
struct ExplainArgs {
    /// A results folder written by `sim run` (holds scenario.toml and summary.json).
    dir: PathBuf,
    #[command(flatten)]
    opts: ExplainFlags,
    /// Print the explanation as JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// Scenario files or folders of them (default: scenarios/).
    paths: Vec<PathBuf>,
    /// Override a key in every scenario (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE", value_parser = parse_set)]
    sets: Vec<(String, String)>,
    /// Also run each scenario twice and compare event logs; report where they diverge.
    #[arg(long)]
    determinism: bool,
    /// Also check the conservation invariants after every event (slow).
    #[arg(long)]
    invariants: bool,
    /// JUnit XML report.
    #[arg(long, value_name = "FILE", default_value = "out/check/junit.xml")]
    junit: PathBuf,
    /// Worker threads for the seeds of a scenario (default: all cores).
    #[arg(long, short)]
    jobs: Option<usize>,
    /// Print only failures and the totals.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Args, Debug)]
struct CompareArgs {
    /// Baseline: golden file, summary.json, or results folder.
    a: PathBuf,
    /// New results, same kinds.
    b: PathBuf,
    /// Relative tolerance (of the baseline value).
    #[arg(long, default_value_t = 0.0)]
    rel_tol: f64,
    /// Absolute tolerance.
    #[arg(long, default_value_t = 1e-9)]
    abs_tol: f64,
    /// Compare only these metrics (repeatable).
    #[arg(long = "metric", value_name = "METRIC")]
    metrics: Vec<String>,
    /// Also list metrics that changed within tolerance.
    #[arg(long)]
    all: bool,
}

#[derive(Args, Debug)]
struct SweepArgs {
    #[command(flatten)]
    scenario: ScenarioArgs,
    /// Axis with explicit values: -L router.policy.band 0,1,2,4 (repeatable; values are
    /// TOML, split at top-level commas, so inline tables work).
    #[arg(short = 'L', long = "parameter-list", num_args = 2, value_names = ["PATH", "VALUES"], action = clap::ArgAction::Append, allow_hyphen_values = true)]
    lists: Vec<String>,
    /// Decimal scan: -P router.engine_stats_interval_s 0.5 30 -D 0.5 (repeatable).
    #[arg(short = 'P', long = "parameter-scan", num_args = 3, value_names = ["PATH", "MIN", "MAX"], action = clap::ArgAction::Append, allow_hyphen_values = true)]
    scans: Vec<String>,
    /// Step of the -P scans: one for all, or one per -P in order (default 1).
    #[arg(
        short = 'D',
        long = "parameter-step",
        value_name = "STEP",
        allow_hyphen_values = true
    )]
    steps: Vec<String>,
    /// Seeds per point: the scenario seed and the next N-1 (common random numbers: a seed
    /// gives every point the same workload draws).
    #[arg(long)]
    seeds: Option<u64>,
    /// Worker threads (default: all cores).
    #[arg(long, short)]
    jobs: Option<usize>,
    /// Run only shard K of N (0-based, e.g. $SLURM_ARRAY_TASK_ID/N); writes
    /// <out>/shards/shard-K-of-N.json for `sim merge`.
    #[arg(long, value_name = "K/N", value_parser = crate::sweep::exec::parse_shard)]
    shard: Option<(u64, u64)>,
    /// Results folder (default: out/<scenario name>, an ignored folder).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Keep the runs already in the results folder (same sweep) and run only the rest.
    #[arg(long)]
    resume: bool,
    /// Metric for the Markdown table and plots (repeatable; default: idle_while_queued_s,
    /// ttft_p99_s, ...; plots use the first two).
    #[arg(long = "metric", value_name = "METRIC")]
    metrics: Vec<String>,
    /// Axes of the heatmap, by axis name: --heatmap engine_stats_interval_s,band.
    #[arg(long, value_name = "X,Y")]
    heatmap: Option<String>,
    /// Axes of the line plot: --line engine_stats_interval_s,fallback.
    #[arg(long, value_name = "X[,SERIES]")]
    line: Option<String>,
    /// Refuse grids above this many runs (points x seeds).
    #[arg(long, default_value_t = crate::sweep::spec::DEFAULT_MAX_RUNS)]
    max_runs: u64,
    /// Print the grid (points and their axis values) and exit without running.
    #[arg(long)]
    list: bool,
    /// Do not draw plots.
    #[arg(long)]
    no_plots: bool,
    #[command(flatten)]
    plot: crate::plot::PlotArgs,
    /// No progress bar, no table on stdout.
    #[arg(long, short)]
    quiet: bool,
    /// Seconds between progress lines when stderr is not a terminal (a batch log).
    #[arg(long, value_name = "S", default_value_t = crate::sweep::progress::LINE_EVERY.as_secs_f64())]
    progress_every_s: f64,
}

#[derive(Args, Debug)]
struct MergeArgs {
    /// Shard files written by `sim sweep --shard K/N`.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Results folder (default: the folder that holds `shards/`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Do not draw plots.
    #[arg(long)]
    no_plots: bool,
    #[command(flatten)]
    plot: crate::plot::PlotArgs,
    /// No table on stdout.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Args, Debug)]
struct PoliciesArgs {
    /// Print JSON (kind, source, signals, params with upstream defaults) instead of text.
    #[arg(long)]
    json: bool,
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
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return usage_error(&e),
    };
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

/// Help and version go to stdout (exit 0); a usage error is its first line alone on stderr
/// (exit 2), like every other bad input, without clap's usage block.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
        || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    {
        let _ = e.print();
        return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        };
    }
    let text = e.render().to_string();
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("error: invalid arguments");
    eprintln!("{} (see --help)", line.trim_end());
    ExitCode::from(2)
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
        Command::Sweep(a) => cmd_sweep(*a),
        Command::Merge(a) => cmd_merge(a),
        Command::Check(a) => cmd_check(a),
        Command::Policies(a) => {
            if a.json {
                print!("{}", crate::policy::catalogue::to_json());
            } else {
                print!("{}", crate::policy::catalogue::render());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Compare(a) => cmd_compare(a),
        Command::Explain(a) => cmd_explain(a),
        Command::Bench(a) => cmd_bench(a),
        Command::Trace(t) => cmd_trace(t),
        Command::Tune(a) => crate::tune::cli::cmd_tune(*a),
        Command::Profiles(a) => crate::profiles::cli(&a),
        Command::Import(a) => crate::import::run(*a),
    }
}

fn read_trace(a: &TraceReadArgs) -> Result<crate::trace::Trace> {
    let format = match &a.format {
        Some(f) => Some(crate::trace::Format::parse(f).map_err(|m| anyhow::anyhow!("--format: {m}"))?),
        None => None,
    };
    anyhow::ensure!(a.block_tokens != Some(0), "--block-tokens must be at least 1");
    let agent = crate::trace::agent_cfg::cli_read_options(a.columns.as_deref(), &a.session_attributes)
        .map_err(|m| anyhow::anyhow!("--columns: {m}"))?;
    let t = crate::trace::calls::read(
        &a.file,
        crate::trace::ReadOptions {
            format,
            skip_bad_rows: a.skip_bad_rows,
        },
        &agent,
    )?;
    for n in t.notes() {
        eprintln!("note: {n}");
    }
    Ok(t)
}

/// Tokens per block id: the flag, else what the trace says, else its format's default.
fn block_tokens_of(a: &TraceReadArgs, t: &crate::trace::Trace) -> u32 {
    a.block_tokens.unwrap_or_else(|| crate::trace::calls::block_tokens(t))
}

fn cmd_trace(t: TraceCommand) -> Result<ExitCode> {
    use crate::trace::sessions::{InferConfig, SynthConfig};
    match t {
        TraceCommand::Inspect(a) => {
            let tr = read_trace(&a.read)?;
            let x = crate::trace::inspect::inspect(&tr, block_tokens_of(&a.read, &tr), &InferConfig::default());
            if a.json {
                println!("{}", serde_json::to_string_pretty(&x)?);
            } else {
                print!("{}", crate::trace::inspect::render(&x));
            }
        }
        TraceCommand::Convert(a) if a.from_run => {
            let (n, scen) = crate::trace::from_run::convert(&a.read.file, &a.out)?;
            eprintln!(
                "wrote {n} calls to {} and the replay scenario {}",
                a.out.display(),
                scen.display()
            );
        }
        TraceCommand::Convert(a) => {
            let tr = read_trace(&a.read)?;
            let block_tokens = block_tokens_of(&a.read, &tr);
            let mode = match &a.sessions {
                Some(m) => Some(crate::trace::SessionMode::parse(m).map_err(|e| anyhow::anyhow!("--sessions: {e}"))?),
                None => None,
            };
            let mut n = 0;
            crate::atomic::write_with(&a.out, |tmp| {
                let mut w = std::io::BufWriter::new(std::fs::File::create(tmp)?);
                n = crate::trace::convert::write_native(
                    &tr,
                    mode,
                    &InferConfig::default(),
                    &SynthConfig::default(),
                    block_tokens,
                    a.seed,
                    &mut w,
                )?;
                std::io::Write::flush(&mut w)?;
                Ok(())
            })?;
            eprintln!("wrote {n} rows to {}", a.out.display());
        }
        TraceCommand::Bench(a) => {
            let mut times = Vec::new();
            let mut rows = 0;
            let bytes = std::fs::metadata(&a.read.file).map_or(0, |m| m.len());
            for _ in 0..a.runs.max(1) {
                let t0 = std::time::Instant::now();
                let tr = read_trace(&a.read)?;
                times.push(t0.elapsed().as_secs_f64());
                rows = tr.rows.len();
            }
            times.sort_by(f64::total_cmp);
            let med = times[times.len() / 2].max(1e-9);
            println!(
                "{}: {rows} rows, {:.1} MB in {:.4} s (median of {}): {:.0} rows/s, {:.1} MB/s",
                a.read.file.display(),
                bytes as f64 / 1e6,
                med,
                times.len(),
                rows as f64 / med,
                bytes as f64 / 1e6 / med
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn load_scenario(a: &ScenarioArgs) -> Result<(Scenario, Workload, String)> {
    let mut sets = a.sets.clone();
    if let Some(seed) = a.seed {
        sets.push(("seed".into(), seed.to_string()));
    }
    Ok(load(&a.scenario, &sets)?)
}

/// `sim run` refuses a scenario whose `[sweep]` or `[expect]` `sim sweep`/`sim check` would
/// (with the file's own seed: `--seed` picks this run, not the check's seeds).
fn check_tool_tables(a: &ScenarioArgs) -> Result<()> {
    let mut src = Source::read(&a.scenario)?;
    src.apply(&a.sets, "--set")?;
    let seed = src.table.get("seed").and_then(toml::Value::as_integer).unwrap_or(1);
    crate::check::validate_tools(&src, seed.max(0) as u64)
}

/// Where `sim run`/`sim sweep` write without `--out`: `out/<name>`, ignored by git, so a
/// user's runs never touch the committed reference results in `results/` (CI writes those
/// only through an explicit `--out`).
pub fn default_out(name: &str) -> PathBuf {
    Path::new("out").join(name)
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
    a.plot.apply();
    let (scenario, workload, effective) = load_scenario(&a.scenario)?;
    check_tool_tables(&a.scenario)?;
    if !a.quiet {
        for n in &workload.notes {
            eprintln!("note: {n}");
        }
    }
    let opts = RunOptions {
        record_series: !a.no_files,
        // Always: the health hints read the decision audit.
        record_decisions: true,
        check_invariants: a.invariants,
        record_event_log: false,
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
    let names: Vec<String> = res.summary.backends.iter().map(|b| b.name.clone()).collect();
    let interval_s = scenario.sim.router.engine_stats_interval.as_secs_f64();
    let hints = crate::hints::hints(&res.decisions, &names, interval_s);
    if !a.quiet {
        print!("{}", render(&res.summary, Some(&perf)));
        for l in res.summary.replay.iter().flat_map(crate::trace::fidelity::render) {
            println!("{l}");
        }
        for h in &hints {
            println!("hint [{}] {}", h.kind, h.message);
        }
    }
    if let Some(dir) = &a.save_golden {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let p = golden_path(dir, &res.summary.scenario);
        write_json(&p, &Golden::of(&res.summary, &effective)).with_context(|| format!("writing {}", p.display()))?;
        if !a.quiet {
            println!("golden: {}", p.display());
        }
    }
    if !a.no_files {
        let dir = a.out.clone().unwrap_or_else(|| default_out(&scenario.sim.name));
        // Whole or absent: written into a staging folder, moved into place when complete.
        let stage = crate::atomic::Staging::new(&dir)?;
        let mut written = write_all(stage.path(), &res, &effective, &perf, &hints)?;
        let fig = BackendSeries::new(&res.summary, &res.series);
        written.extend(save(&fig, &stage.path().join("timeseries"))?);
        if a.timeline {
            let p = stage.path().join("timeline.json");
            crate::export::timeline::write(&p, &res).with_context(|| format!("writing {}", p.display()))?;
            written.push(p);
        }
        if a.explain {
            let src = Source::parse(&effective, &file, &res.summary.scenario)?;
            let x = explanation(&res, &scenario, &workload, &src, &a.explain_opts)?;
            written.extend(write_explanation(stage.path(), &x)?);
            if !a.quiet {
                print!("\n{}", crate::explain::render(&x));
            }
        }
        stage.commit()?;
        written.push(dir.join(crate::atomic::MANIFEST));
        if !a.quiet {
            println!("wrote {}/{{{}}}", dir.display(), file_names(&written));
        }
    } else if a.explain {
        let src = Source::parse(&effective, &file, &res.summary.scenario)?;
        let x = explanation(&res, &scenario, &workload, &src, &a.explain_opts)?;
        if !a.quiet {
            print!("\n{}", crate::explain::render(&x));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Explains `res` and adds the counterfactual re-runs (same scenario, seed and workload):
/// fresh signals for the scenario's own policy, then each `--policy`.
fn explanation(
    res: &crate::sim::RunResult,
    scenario: &Scenario,
    workload: &Workload,
    src: &Source,
    f: &ExplainFlags,
) -> Result<crate::explain::Explanation> {
    use crate::explain::{Counterfactual, ExplainOptions, explain};
    anyhow::ensure!(
        f.merge_gap_s.is_finite() && f.merge_gap_s >= 0.0,
        "--merge-gap-s must be a finite number of seconds >= 0"
    );
    let interval_s = scenario.sim.router.engine_stats_interval.as_secs_f64();
    let stale_after_s = f.stale_after_s.unwrap_or(interval_s);
    anyhow::ensure!(
        stale_after_s.is_finite() && stale_after_s >= 0.0,
        "--stale-after-s must be a finite number of seconds >= 0"
    );
    let opts = ExplainOptions {
        merge_gap_s: f.merge_gap_s,
        max_episodes: f.episodes,
        stale_after_s,
        ..ExplainOptions::for_interval(interval_s)
    };
    let names: Vec<String> = res.summary.backends.iter().map(|b| b.name.clone()).collect();
    let mut x = explain(res, &scenario.sim, &names, &opts);
    if f.no_counterfactual {
        return Ok(x);
    }
    let quiet = crate::sim::RunOptions::summary_only();
    let fresh = run(scenario.sim.with_fresh_signals(), workload, quiet).context("the fresh-signals re-run")?;
    x.counterfactuals
        .push(Counterfactual::of("fresh signals", &fresh.0.summary));
    let policies = if f.policies.is_empty() {
        vec!["{ kind = \"least_request\" }".to_string()]
    } else {
        f.policies.clone()
    };
    for p in &policies {
        let mut alt = src.clone();
        alt.apply(&[("router.policy".to_string(), p.clone())], "--policy")?;
        let s = alt.scenario()?;
        let (r, _) = run(s.sim, workload, quiet).with_context(|| format!("the re-run with --policy {p}"))?;
        x.counterfactuals.push(Counterfactual::of("other policy", &r.summary));
    }
    Ok(x)
}

fn write_explanation(dir: &Path, x: &crate::explain::Explanation) -> Result<Vec<PathBuf>> {
    let md = dir.join("explain.md");
    crate::atomic::write_file(&md, crate::explain::render(x).as_bytes())?;
    let js = dir.join("explain.json");
    write_json(&js, x).with_context(|| format!("writing {}", js.display()))?;
    Ok(vec![md, js])
}

fn cmd_explain(a: ExplainArgs) -> Result<ExitCode> {
    let summary_path = a.dir.join("summary.json");
    let stored = std::fs::read_to_string(&summary_path)
        .with_context(|| format!("{}: not a results folder written by `sim run`", summary_path.display()))?;
    crate::atomic::verify(&a.dir)?;
    let name = serde_json::from_str::<serde_json::Value>(&stored)
        .ok()
        .and_then(|v| v.get("scenario").and_then(|n| n.as_str()).map(str::to_string))
        .with_context(|| format!("{}: no `scenario` name in it", summary_path.display()))?;
    let scen_path = a.dir.join("scenario.toml");
    let text = std::fs::read_to_string(&scen_path).with_context(|| format!("reading {}", scen_path.display()))?;
    let src = Source::parse(&text, &scen_path.display().to_string(), &name)?;
    let (scenario, workload, _) = src.build()?;
    let (res, _) = run(scenario.sim.clone(), &workload, crate::sim::RunOptions::default())
        .with_context(|| format!("re-running {}", scen_path.display()))?;
    let mut again = Vec::new();
    serde_json::to_writer_pretty(&mut again, &res.summary)?;
    again.push(b'\n');
    if again != stored.as_bytes() {
        eprintln!(
            "warning: {} does not match the re-run of {} (another fleetsim version, or an edited file); explaining the re-run",
            summary_path.display(),
            scen_path.display()
        );
    }
    let x = explanation(&res, &scenario, &workload, &src, &a.opts)?;
    let written = write_explanation(&a.dir, &x)?;
    crate::atomic::add_to_manifest(&a.dir, &["explain.md", "explain.json"])?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&x)?);
    } else {
        print!("{}", crate::explain::render(&x));
        for l in res.summary.replay.iter().flat_map(crate::trace::fidelity::render) {
            println!("{l}");
        }
        println!("\nwrote {}/{{{}}}", a.dir.display(), file_names(&written));
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
    let opts = RunOptions::summary_only();
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

fn file_names(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(",")
}

/// `sweep-perf.json` (`sweep-perf-shard-K-of-N.json` for a shard, so shards sharing an
/// output folder do not overwrite each other's): wall-clock figures of the runs this
/// invocation ran (not those kept by `--resume`).
#[derive(serde::Serialize)]
struct SweepPerf {
    build: &'static str,
    shard: Option<[u64; 2]>,
    runs: u64,
    resumed_runs: u64,
    jobs: usize,
    wall_s: f64,
    runs_per_s: f64,
    events: u64,
    events_per_s: f64,
}

fn cmd_sweep(a: SweepArgs) -> Result<ExitCode> {
    a.plot.apply();
    let mut sets = a.scenario.sets.clone();
    if let Some(seed) = a.scenario.seed {
        sets.push(("seed".into(), seed.to_string()));
    }
    let mut src = Source::read(&a.scenario.scenario)?;
    src.apply(&sets, "--set")?;
    let base = src.scenario()?;
    let cli = CliAxes {
        lists: a.lists.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect(),
        scans: a
            .scans
            .chunks(3)
            .map(|c| (c[0].clone(), c[1].clone(), c[2].clone()))
            .collect(),
        steps: a.steps.clone(),
        seeds: a.seeds,
        metrics: a.metrics.clone(),
        heatmap: a.heatmap.clone(),
        line: a.line.clone(),
    };
    let file = a.scenario.scenario.display().to_string();
    let plan = plan(&src, &cli, a.max_runs).map_err(|m| {
        if m.starts_with(&file) {
            anyhow::anyhow!(m)
        } else {
            anyhow::anyhow!("{file}: {m}")
        }
    })?;
    validate_points(&src, &plan)?;
    if a.list {
        let mut out = String::new();
        let mut head = vec!["point".to_string()];
        head.extend(plan.axes.iter().map(|ax| ax.name.clone()));
        out.push_str(&head.join("\t"));
        out.push('\n');
        for p in 0..plan.points() {
            let mut row = vec![p.to_string()];
            row.extend(plan.labels(p).into_iter().map(str::to_string));
            out.push_str(&row.join("\t"));
            out.push('\n');
        }
        print!("{out}");
        eprintln!(
            "{} points x {} seeds = {} runs",
            plan.points(),
            plan.seeds.len(),
            plan.runs()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let meta = crate::sweep::meta(&src, &base.sim.name, &sets, plan);
    let dir = a.out.clone().unwrap_or_else(|| default_out(&base.sim.name));
    let target = match a.shard {
        Some((k, n)) => shard_path(&dir, k, n),
        None => dir.join("sweep.json"),
    };
    let mut done = Vec::new();
    if a.resume && target.exists() {
        let prev = table::read(&target)?;
        anyhow::ensure!(
            prev.meta.same_runs(&meta),
            "{}: written by a different sweep (scenario, version, overrides, axes or seeds differ); remove it or drop --resume",
            target.display()
        );
        if !prev.complete || a.shard.is_some() {
            let me = crate::sweep::build::identity();
            table::check_same_build(&target, prev.build.as_deref(), Path::new("this sim"), Some(me))?;
        }
        done = prev.rows;
    }
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    anyhow::ensure!(jobs >= 1, "--jobs must be at least 1");
    let owned = owned_runs(&meta.plan, a.shard).len() as u64;
    let skipped = done.len();
    let resumed: Vec<u64> = done.iter().map(|r: &table::RunRow| r.run).collect();
    let partial_meta = meta.clone();
    let partial_dir = dir.clone();
    let shard = a.shard;
    let on_partial: PartialSink = Box::new(move |rows| {
        let f = SweepFile {
            meta: partial_meta.clone(),
            shard: shard.map(|(k, n)| [k, n]),
            complete: false,
            build: Some(crate::sweep::build::identity().to_string()),
            rows: rows.to_vec(),
        };
        match shard {
            Some((k, n)) => write_shard(&shard_path(&partial_dir, k, n), &f),
            None => table::write_tables(&partial_dir, &f).map(|_| ()),
        }
    });
    if !a.quiet && skipped > 0 {
        eprintln!("resuming: {skipped} of {owned} runs already in {}", target.display());
    }
    let (result, wall) = match execute(
        &src,
        &meta,
        ExecOptions {
            jobs,
            shard: a.shard,
            progress: !a.quiet,
            progress_every: std::time::Duration::try_from_secs_f64(a.progress_every_s)
                .map_err(|_| anyhow::anyhow!("--progress-every-s must be a finite number of seconds >= 0"))?,
            done,
            on_partial: Some(on_partial),
        },
    ) {
        Ok(r) => r,
        Err(f) => {
            eprintln!("error: {file}: {}", failure_error(&f));
            if f.invariant {
                eprintln!("partial results kept in {}", dir.display());
                return Ok(ExitCode::from(1));
            }
            return Ok(ExitCode::from(2));
        }
    };
    let ran = result.rows.len().saturating_sub(skipped) as u64;
    let events: u64 = result
        .rows
        .iter()
        .filter(|r| resumed.binary_search(&r.run).is_err())
        .filter_map(|r| r.metrics.get("events").and_then(serde_json::Value::as_u64))
        .sum();
    let wall_s = wall.as_secs_f64().max(1e-9);
    let perf = SweepPerf {
        build: crate::sweep::build::identity(),
        shard: a.shard.map(|(k, n)| [k, n]),
        runs: ran,
        resumed_runs: skipped as u64,
        jobs,
        wall_s,
        runs_per_s: ran as f64 / wall_s,
        events,
        events_per_s: events as f64 / wall_s,
    };
    let written = match a.shard {
        Some((k, n)) => {
            let p = shard_path(&dir, k, n);
            write_shard(&p, &result)?;
            vec![p]
        }
        None => crate::sweep::write_outputs(&dir, &result, !a.no_plots)?,
    };
    let perf_name = match a.shard {
        Some((k, n)) => format!("sweep-perf-shard-{k}-of-{n}.json"),
        None => "sweep-perf.json".into(),
    };
    write_json(&dir.join(perf_name), &perf)?;
    if !a.quiet {
        if a.shard.is_none() {
            print!("{}", String::from_utf8_lossy(&md_table(&result)?));
            println!("wrote {}/{{{}}}", dir.display(), file_names(&written));
        } else {
            println!(
                "wrote {} ({} runs); when every shard is done: sim merge {}/shards/*.json",
                written[0].display(),
                result.rows.len(),
                dir.display()
            );
        }
        if ran == 0 {
            eprintln!("nothing to run: all {skipped} runs were already done");
        } else {
            eprintln!(
                "{ran} runs in {wall_s:.2} s on {jobs} threads: {:.0} runs/s, {:.2} M events/s",
                perf.runs_per_s,
                perf.events_per_s / 1e6
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn md_table(f: &SweepFile) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    table::write_aggregate_md(&mut out, &f.meta, &table::aggregate(&f.rows))?;
    Ok(out)
}

fn write_shard(p: &Path, f: &SweepFile) -> Result<()> {
    table::write_file(p, f)
}

fn cmd_merge(a: MergeArgs) -> Result<ExitCode> {
    a.plot.apply();
    let mut files = Vec::new();
    for p in &a.files {
        files.push((p.clone(), table::read(p)?));
    }
    let merged = table::merge(&files)?;
    let dir = match &a.out {
        Some(d) => d.clone(),
        None => {
            let parent = a.files[0]
                .parent()
                .filter(|d| d.file_name().is_some_and(|n| n == "shards"));
            parent
                .and_then(Path::parent)
                .map(Path::to_path_buf)
                .with_context(|| format!("{}: not inside a shards/ folder; give --out", a.files[0].display()))?
        }
    };
    let written = crate::sweep::write_outputs(&dir, &merged, !a.no_plots)?;
    if !a.quiet {
        print!("{}", String::from_utf8_lossy(&md_table(&merged)?));
        println!("wrote {}/{{{}}}", dir.display(), file_names(&written));
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_check(a: CheckArgs) -> Result<ExitCode> {
    let paths = if a.paths.is_empty() {
        vec![PathBuf::from("scenarios")]
    } else {
        a.paths.clone()
    };
    let files = expand(&paths)?;
    let opts = CheckOptions {
        determinism: a.determinism,
        invariants: a.invariants,
        jobs: a
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
    };
    let mut reports = Vec::new();
    for f in &files {
        reports.push(check_file(f, &a.sets, opts)?);
    }
    let table = crate::check::render(&reports);
    let failed = reports.iter().flat_map(|r| &r.outcomes).any(|o| !o.pass);
    if a.quiet {
        for line in table.lines().filter(|l| l.contains("FAIL")) {
            println!("{line}");
        }
        println!("{}", table.lines().last().unwrap_or_default());
    } else {
        print!("{table}");
    }
    if let Some(d) = a.junit.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let xml = crate::check::junit::to_xml(&reports)?;
    crate::atomic::write_file(&a.junit, &xml)?;
    if !a.quiet {
        println!("junit: {}", a.junit.display());
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn cmd_compare(a: CompareArgs) -> Result<ExitCode> {
    anyhow::ensure!(
        a.rel_tol >= 0.0 && a.abs_tol >= 0.0 && a.rel_tol.is_finite() && a.abs_tol.is_finite(),
        "tolerances must be finite and >= 0"
    );
    let (la, ma) = load_metrics(&a.a)?;
    let (lb, mb) = load_metrics(&a.b)?;
    let metrics: Vec<String> = a
        .metrics
        .iter()
        .map(|m| crate::metrics::canonical_metric(m).into_owned())
        .collect();
    if let Some(bad) = metrics.iter().find(|m| !ma.contains_key(*m) && !mb.contains_key(*m)) {
        anyhow::bail!("--metric {bad}: neither side reports it");
    }
    let deltas = compare(
        &ma,
        &mb,
        Tolerance {
            abs: a.abs_tol,
            rel: a.rel_tol,
        },
        &metrics,
    );
    print!(
        "{}",
        crate::check::golden::render(
            &deltas,
            &format!("{} [{}]", a.a.display(), la),
            &format!("{} [{}]", a.b.display(), lb),
            a.all
        )
    );
    Ok(if deltas.iter().all(|d| d.ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
