//! `sim run`: one scenario, its summary on stdout and its result files.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use super::explain::ExplainFlags;
use super::out::{out, outln};
use super::shared::{ScenarioArgs, check_tool_tables, default_out, file_names, load_scenario};
use crate::export::Tables;
use crate::report::render;
use crate::run::{Options, Progress, Run, RunError, Sampling, Simulated};
use crate::scenario::Scenario;
use crate::workload::Workload;

#[derive(Args, Debug)]
pub(super) struct RunArgs {
    #[command(flatten)]
    pub(super) scenario: ScenarioArgs,
    /// Results folder (default: out/<scenario name>, an ignored folder).
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    /// Do not write result files, only print the summary.
    #[arg(long)]
    pub(super) no_files: bool,
    /// Check every invariant after every event (slow); exit 1 on a violation.
    #[arg(long)]
    pub(super) invariants: bool,
    /// Print nothing on success (files are still written).
    #[arg(long, short)]
    pub(super) quiet: bool,
    /// Show what the run is doing with the time elapsed, on stderr: a spinner on a terminal
    /// (shown there anyway unless --quiet), plain lines in a log. Never in an output file.
    #[arg(long)]
    pub(super) progress: bool,
    /// Also store a compact golden summary (flattened metrics) as DIR/<scenario>.json,
    /// for `sim compare` (DIR defaults to out/golden).
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = "out/golden")]
    pub(super) save_golden: Option<PathBuf>,
    /// Also explain the stranded capacity (as `sim explain` does) and write explain.md/json.
    #[arg(long)]
    pub(super) explain: bool,
    /// Leave out the per-decision files (decisions.csv, decisions_long.csv), most of a long
    /// run's output (about 1 GB per million requests); everything else is written, and
    /// `sim explain` still works (it re-simulates the scenario).
    #[arg(long)]
    pub(super) no_decisions: bool,
    /// Skip the seed check: by default the run is repeated at the next 4 seeds (scenarios
    /// planning up to 50,000 requests) and its headline figures set beside theirs, with a
    /// warning when the scenario is seed-sensitive (terminal only; off with --quiet).
    #[arg(long)]
    pub(super) no_seed_check: bool,
    /// Also write timeline.json: every request's queued, prefill and decode phases per
    /// backend in Chrome trace event format (open in https://ui.perfetto.dev).
    #[arg(long)]
    pub(super) timeline: bool,
    /// Also write metrics.om: the run's per-backend series as vLLM exports them, sampled
    /// every --metrics-step, as OpenMetrics text with timestamps (load it into Prometheus
    /// with `promtool tsdb create-blocks-from openmetrics`).
    #[arg(long)]
    pub(super) openmetrics: bool,
    /// Sampling interval of metrics.om, seconds (a scrape interval).
    #[arg(long, default_value_t = 1.0, requires = "openmetrics")]
    pub(super) metrics_step: f64,
    /// Unix time, seconds, of simulated time zero in metrics.om.
    #[arg(long, default_value_t = 0, requires = "openmetrics")]
    pub(super) metrics_epoch: u64,
    #[command(flatten)]
    pub(super) explain_opts: ExplainFlags,
    /// Event-loop implementation: fast, or the per-iteration reference it is tested
    /// against (identical outputs; docs/engine.md).
    #[arg(long, value_enum, default_value_t = super::shared::EngineArg::Fast)]
    pub(super) engine: super::shared::EngineArg,
    /// Format of the tables (requests, timeseries, decisions, decisions_long): csv,
    /// parquet (typed, zstd-compressed columns; docs/OUTPUTS.md), or auto: CSV for runs
    /// planning fewer than 100,000 requests, Parquet from there on (said on stderr).
    #[arg(long, value_enum, default_value_t = TableFormat::Auto)]
    pub(super) format: TableFormat,
    #[command(flatten)]
    pub(super) plot: crate::plot::PlotArgs,
}

/// `--format` of `sim run`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TableFormat {
    /// CSV below [`AUTO_PARQUET_REQUESTS`] planned requests, Parquet from there on.
    Auto,
    /// requests.csv, timeseries.csv, decisions.csv, decisions_long.csv.
    Csv,
    /// requests.parquet, timeseries.parquet, decisions.parquet, decisions_long.parquet.
    Parquet,
}

/// Planned requests from which `--format auto` writes Parquet: there the CSV tables pass
/// about 100 MB on a 16-backend fleet (1.7 KB of CSV per request, 1.6 KB of it the
/// decision files), while the committed and most users' runs stay far below (burst8: 0.3 MB).
pub(super) const AUTO_PARQUET_REQUESTS: usize = 100_000;

impl TableFormat {
    /// The tables a run planning `requests` requests writes.
    fn tables(self, requests: usize) -> Tables {
        match self {
            TableFormat::Csv => Tables::Csv,
            TableFormat::Parquet => Tables::Parquet,
            TableFormat::Auto if requests >= AUTO_PARQUET_REQUESTS => Tables::Parquet,
            TableFormat::Auto => Tables::Csv,
        }
    }
}

/// Refuses flags that contradict each other, before anything is read.
fn check_flags(a: &RunArgs) -> Result<()> {
    if !(a.metrics_step.is_finite() && a.metrics_step >= 0.001 && a.metrics_step <= 86_400.0) {
        anyhow::bail!(
            "--metrics-step {}: expected seconds between 0.001 and 86400",
            a.metrics_step
        );
    }
    if a.format == TableFormat::Parquet && a.no_files {
        anyhow::bail!("--format parquet writes files: drop --no-files");
    }
    if a.openmetrics && a.no_files {
        anyhow::bail!("--openmetrics writes a file: drop --no-files");
    }
    Ok(())
}

/// The run's options from the flags (saying on stderr, unless `--quiet`, what the
/// workload notes and which tables `--format auto` chose).
fn options(a: &RunArgs, scenario: &Scenario, workload: &Workload) -> Result<Options> {
    if !a.quiet {
        for n in &workload.notes {
            eprintln!("note: {n}");
        }
    }
    let tables = a.format.tables(workload.total_requests());
    if a.format == TableFormat::Auto && tables == Tables::Parquet && !a.no_files && !a.quiet {
        eprintln!(
            "note: --format auto: {} planned requests (at least {AUTO_PARQUET_REQUESTS}), so the tables are Parquet; --format csv writes CSV",
            workload.total_requests()
        );
    }
    let explain = if a.explain {
        Some(a.explain_opts.explain(scenario.sim.router.engine_stats_interval)?)
    } else {
        None
    };
    Ok(Options {
        out: (!a.no_files).then(|| a.out.clone().unwrap_or_else(|| default_out(&scenario.sim.name))),
        engine: a.engine.into(),
        invariants: a.invariants,
        tables,
        decisions: !a.no_decisions,
        timeline: a.timeline,
        openmetrics: a.openmetrics.then(|| Sampling {
            step_ns: (a.metrics_step * 1000.0).round() as u64 * 1_000_000,
            epoch_s: a.metrics_epoch,
        }),
        explain,
        dpi: a.plot.dpi,
        progress: Progress::on_stderr(a.progress, a.quiet),
    })
}

pub(super) fn cmd_run(a: RunArgs) -> Result<ExitCode> {
    check_flags(&a)?;
    let (scenario, workload, effective) = load_scenario(&a.scenario)?;
    check_tool_tables(&a.scenario)?;
    let file = a.scenario.scenario.display().to_string();
    if a.explain {
        super::shared::check_held_audit(&scenario, &workload, &file, "sim run --explain")?;
    }
    let opts = options(&a, &scenario, &workload)?;
    let done = match Run::new(&scenario, &workload, &effective, &file, opts).simulate() {
        Ok(done) => done,
        Err(RunError::Invariant(e)) => {
            let seed = scenario.sim.seed;
            eprintln!("error: {file}: {e}\nreproduce with: sim run {file} --seed {seed} --invariants");
            return Ok(ExitCode::from(1));
        }
        Err(RunError::Other(e)) => return Err(e),
    };
    if !a.quiet {
        print_summary(&done)?;
        if !a.no_seed_check {
            print_seed_check(&scenario, &workload, &done)?;
        }
    }
    if let Some(dir) = &a.save_golden {
        let p = done.save_golden(dir)?;
        if !a.quiet {
            outln!("golden: {}", p.display())?;
        }
    }
    let x = done.explanation()?;
    let folder = done.write(x.as_ref())?;
    if !a.quiet {
        if let Some(x) = &x {
            out!("\n{}", crate::explain::render(x))?;
        }
        if let Some((dir, written)) = folder {
            outln!("wrote {}/{{{}}}", dir.display(), file_names(&written))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The summary, the replay's fidelity and the hints, on stdout.
fn print_summary(done: &Simulated) -> Result<()> {
    let s = &done.res.summary;
    out!("{}", render(s, Some(&done.perf)))?;
    for l in s.replay.iter().flat_map(crate::metrics::fidelity::render) {
        outln!("{l}")?;
    }
    for h in &done.hints {
        outln!("hint [{}] {}", h.kind, h.message)?;
    }
    Ok(())
}

/// The seed check's lines (the run's headline figures beside the next seeds'), on stdout.
fn print_seed_check(scenario: &Scenario, workload: &Workload, done: &Simulated) -> Result<()> {
    let jobs = crate::run::jobs_flag(None)?;
    let check = crate::run::seed_check::check(scenario, workload.total_requests(), &done.res.summary, jobs)?;
    for l in &check.lines {
        outln!("{l}")?;
    }
    Ok(())
}
