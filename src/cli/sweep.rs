//! `sim sweep`: a grid of scenario variants x seeds, run in parallel, sharded or resumed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use super::out::{out, outln};
use super::shared::{ScenarioArgs, default_out, file_names};
use crate::export::write_json;
use crate::scenario::Source;
use crate::sweep::exec::{
    ExecOptions, PartialSink, Points, execute, failure_error, owned_runs, shard_path, validate_points,
};
use crate::sweep::spec::{CliAxes, plan};
use crate::sweep::table::{self, SweepFile};

#[derive(Args, Debug)]
pub(super) struct SweepArgs {
    #[command(flatten)]
    pub(super) scenario: ScenarioArgs,
    /// Axis with explicit values: -L router.policy.band 0,1,2,4 (repeatable; values are
    /// TOML, split at top-level commas, so inline tables work).
    #[arg(short = 'L', long = "parameter-list", num_args = 2, value_names = ["PATH", "VALUES"], action = clap::ArgAction::Append, allow_hyphen_values = true)]
    pub(super) lists: Vec<String>,
    /// Decimal scan: -P router.engine_stats_interval_s 0.5 30 -D 0.5 (repeatable).
    #[arg(short = 'P', long = "parameter-scan", num_args = 3, value_names = ["PATH", "MIN", "MAX"], action = clap::ArgAction::Append, allow_hyphen_values = true)]
    pub(super) scans: Vec<String>,
    /// Step of the -P scans: one for all, or one per -P in order (default 1).
    #[arg(
        short = 'D',
        long = "parameter-step",
        value_name = "STEP",
        allow_hyphen_values = true
    )]
    pub(super) steps: Vec<String>,
    /// Seeds per point: the scenario seed and the next N-1 (common random numbers: a seed
    /// gives every point the same workload draws).
    #[arg(long)]
    pub(super) seeds: Option<u64>,
    /// Worker threads (default: all cores).
    #[arg(long, short)]
    pub(super) jobs: Option<usize>,
    #[command(flatten)]
    pub(super) sharding: crate::sweep::shard::ShardArgs,
    /// Results folder (default: out/<scenario name>, an ignored folder).
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    /// Keep the runs already in the results folder (same sweep) and run only the rest.
    #[arg(long)]
    pub(super) resume: bool,
    /// Metric for the Markdown table and plots (repeatable; default: idle_while_queued_s,
    /// ttft_p99_s, ...; plots use the first two).
    #[arg(long = "metric", value_name = "METRIC")]
    pub(super) metrics: Vec<String>,
    /// Axes of the heatmap, by axis name: --heatmap engine_stats_interval_s,band.
    #[arg(long, value_name = "X,Y")]
    pub(super) heatmap: Option<String>,
    /// Axes of the line plot: --line engine_stats_interval_s,fallback.
    #[arg(long, value_name = "X[,SERIES]")]
    pub(super) line: Option<String>,
    /// Refuse grids above this many runs (points x seeds).
    #[arg(long, default_value_t = crate::sweep::spec::DEFAULT_MAX_RUNS)]
    pub(super) max_runs: u64,
    /// Print the grid (points and their axis values) and exit without running.
    #[arg(long)]
    pub(super) list: bool,
    /// Do not draw plots.
    #[arg(long)]
    pub(super) no_plots: bool,
    #[command(flatten)]
    pub(super) plot: crate::plot::PlotArgs,
    /// No progress bar, no table on stdout.
    #[arg(long, short)]
    pub(super) quiet: bool,
    /// Seconds between progress lines when stderr is not a terminal (a batch log).
    #[arg(long, value_name = "S", default_value_t = crate::sweep::progress::LINE_EVERY.as_secs_f64())]
    pub(super) progress_every_s: f64,
}

/// `sweep-perf.json` (`sweep-perf-shard-K-of-N.json` for a shard, so shards sharing an
/// output folder do not overwrite each other's): wall-clock figures of the runs this
/// invocation ran (not those kept by `--resume`).
#[derive(serde::Serialize)]
pub(super) struct SweepPerf {
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

pub(super) fn cmd_sweep(a: SweepArgs) -> Result<ExitCode> {
    let shard = a.sharding.resolve()?;
    let mut sets = a.scenario.sets.clone();
    if let Some(seed) = a.scenario.seed {
        sets.push(("seed".into(), seed.to_string()));
    }
    let mut src = Source::read(&a.scenario.scenario)?;
    src.apply(&sets, "--set")?;
    // Every error of the file at once, those of `[sweep]` and `[expect]` included.
    let base = crate::check::scenario_and_tools(&src)?;
    let file = a.scenario.scenario.display().to_string();
    let plan = plan(&src, &cli_axes(&a), a.max_runs).map_err(|m| {
        if m.starts_with(&file) {
            anyhow::anyhow!(m)
        } else {
            anyhow::anyhow!("{file}: {m}")
        }
    })?;
    let points = Points::new(&plan, Default::default());
    // Parses the traces (into `points`) as it hashes them: the runs read none again.
    let inputs = crate::sweep::inputs_sha256(&src, Some(&plan), points.traces());
    validate_points(&src, &plan, &points)?;
    if a.list {
        print_grid(&plan)?;
        return Ok(ExitCode::SUCCESS);
    }
    let meta = crate::sweep::meta(&base.sim.name, &sets, plan, inputs);
    let dir = a.out.clone().unwrap_or_else(|| default_out(&base.sim.name));
    let target = match shard {
        Some((k, n)) => shard_path(&dir, k, n),
        None => dir.join("sweep.json"),
    };
    let done = if a.resume && target.exists() {
        resumed(&target, &meta, shard)?
    } else {
        Vec::new()
    };
    let jobs = crate::run::jobs_flag(a.jobs)?;
    let skipped = done.len();
    let resumed_runs: Vec<u64> = done.iter().map(|r: &table::RunRow| r.run).collect();
    if !a.quiet && skipped > 0 {
        let owned = owned_runs(&meta.plan, shard).len();
        eprintln!("resuming: {skipped} of {owned} runs already in {}", target.display());
    }
    let opts = ExecOptions {
        jobs,
        shard,
        progress: !a.quiet,
        progress_every: std::time::Duration::try_from_secs_f64(a.progress_every_s)
            .map_err(|_| anyhow::anyhow!("--progress-every-s must be a finite number of seconds >= 0"))?,
        done,
        on_partial: Some(partial_sink(&meta, &dir, shard)),
    };
    let (result, wall) = match execute(&src, &meta, &points, opts) {
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
    let perf = sweep_perf(&result, &resumed_runs, jobs, shard, wall);
    let written = write_results(&dir, &result, &perf, shard, a.plot.dpi(a.no_plots))?;
    if !a.quiet {
        report(&result, &perf, &dir, &written, shard)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The command line's axes, seeds, metrics and plots.
fn cli_axes(a: &SweepArgs) -> CliAxes {
    CliAxes {
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
    }
}

/// `--list`: the grid's points and their axis values on stdout, its size on stderr.
fn print_grid(plan: &crate::sweep::spec::Plan) -> Result<()> {
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
    out!("{out}")?;
    eprintln!(
        "{} points x {} seeds = {} runs",
        plan.points(),
        plan.seeds.len(),
        plan.runs()
    );
    Ok(())
}

/// `--resume`: the rows `target` holds, if the same sweep wrote it (and, for a partial or
/// shard file, the same build).
fn resumed(target: &Path, meta: &table::Meta, shard: Option<(u64, u64)>) -> Result<Vec<table::RunRow>> {
    let prev = table::read(target)?;
    anyhow::ensure!(
        prev.meta.same_runs(meta),
        "{}: written by a different sweep (scenario, version, overrides, axes or seeds differ); remove it or drop --resume",
        target.display()
    );
    if !prev.complete || shard.is_some() {
        let me = crate::sweep::build::identity();
        table::check_same_build(target, prev.build.as_deref(), Path::new("this sim"), Some(me))?;
    }
    Ok(prev.rows)
}

/// Rewrites the partial results (the shard file, or the sweep's tables) from the rows so far.
fn partial_sink(meta: &table::Meta, dir: &Path, shard: Option<(u64, u64)>) -> PartialSink {
    let meta = meta.clone();
    let dir = dir.to_path_buf();
    Box::new(move |rows| {
        let f = SweepFile {
            meta: meta.clone(),
            shard: shard.map(|(k, n)| [k, n]),
            complete: false,
            build: Some(crate::sweep::build::identity().to_string()),
            rows: rows.to_vec(),
        };
        match shard {
            Some((k, n)) => write_shard(&shard_path(&dir, k, n), &f),
            None => crate::sweep::write_tables(&dir, &f).map(|_| ()),
        }
    })
}

/// The wall-clock figures of the runs this invocation ran (those of `resumed` aside).
fn sweep_perf(
    result: &SweepFile,
    resumed: &[u64],
    jobs: usize,
    shard: Option<(u64, u64)>,
    wall: std::time::Duration,
) -> SweepPerf {
    let ran = result.rows.len().saturating_sub(resumed.len()) as u64;
    let events: u64 = result
        .rows
        .iter()
        .filter(|r| resumed.binary_search(&r.run).is_err())
        .filter_map(|r| r.metrics.get("events").and_then(serde_json::Value::as_u64))
        .sum();
    let wall_s = wall.as_secs_f64().max(1e-9);
    SweepPerf {
        build: crate::sweep::build::identity(),
        shard: shard.map(|(k, n)| [k, n]),
        runs: ran,
        resumed_runs: resumed.len() as u64,
        jobs,
        wall_s,
        runs_per_s: ran as f64 / wall_s,
        events,
        events_per_s: events as f64 / wall_s,
    }
}

/// Writes the sweep's files (a shard's file alone for a shard) and its wall-clock figures;
/// returns the paths of the former.
fn write_results(
    dir: &Path,
    result: &SweepFile,
    perf: &SweepPerf,
    shard: Option<(u64, u64)>,
    dpi: Option<u32>,
) -> Result<Vec<PathBuf>> {
    let written = match shard {
        Some((k, n)) => {
            let p = shard_path(dir, k, n);
            write_shard(&p, result)?;
            vec![p]
        }
        None => crate::sweep::write_outputs(dir, result, dpi)?,
    };
    let perf_name = match shard {
        Some((k, n)) => format!("sweep-perf-shard-{k}-of-{n}.json"),
        None => "sweep-perf.json".into(),
    };
    write_json(&dir.join(perf_name), perf)?;
    Ok(written)
}

/// The table and the files written on stdout, the speed on stderr.
fn report(
    result: &SweepFile,
    perf: &SweepPerf,
    dir: &Path,
    written: &[PathBuf],
    shard: Option<(u64, u64)>,
) -> Result<()> {
    if shard.is_none() {
        out!("{}", String::from_utf8_lossy(&md_table(result)?))?;
        outln!("wrote {}/{{{}}}", dir.display(), file_names(written))?;
    } else {
        outln!(
            "wrote {} ({} runs); when every shard is done: sim merge {}/shards/*.json",
            written[0].display(),
            result.rows.len(),
            dir.display()
        )?;
    }
    if perf.runs == 0 {
        eprintln!("nothing to run: all {} runs were already done", perf.resumed_runs);
    } else {
        eprintln!(
            "{} runs in {:.2} s on {} threads: {:.0} runs/s, {:.2} M events/s",
            perf.runs,
            perf.wall_s,
            perf.jobs,
            perf.runs_per_s,
            perf.events_per_s / 1e6
        );
    }
    Ok(())
}

pub(super) fn md_table(f: &SweepFile) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    table::write_aggregate_md(&mut out, &f.meta, &table::aggregate(&f.rows))?;
    Ok(out)
}

pub(super) fn write_shard(p: &Path, f: &SweepFile) -> Result<()> {
    table::write_file(p, f)
}
