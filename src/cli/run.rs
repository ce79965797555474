//! `sim run`: one scenario, its summary on stdout and its result files.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;

use super::explain::{ExplainFlags, explanation, write_explanation};
use super::out::{out, outln};
use super::shared::{ScenarioArgs, check_tool_tables, default_out, file_names, load_scenario, perf_of};
use crate::check::golden::{Golden, golden_path};
use crate::export::{DecisionFiles, RecordFiles, Tables, write_all_as, write_json, write_rest};
use crate::hints::HintScan;
use crate::metrics::{DecisionLog, RequestRec, TsRow};
use crate::plot::save;
use crate::plot::series::{BackendSeries, SeriesPoints};
use crate::report::render;
use crate::scenario::Source;
use crate::sim::{RunOptions, SimError};

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

/// What the simulation hands the writer thread.
enum Batch {
    Decisions(DecisionLog),
    /// Final request records, the first of them request `.0`.
    Requests(usize, Vec<RequestRec>),
    Series(Vec<TsRow>),
}

/// Hands each batch of the decision audit (and of the request records and time series,
/// when `records`) to the writer thread; the bounded channel makes the simulation wait when
/// the writer is behind, so at most a few batches are held.
struct ChannelSink {
    tx: std::sync::mpsc::SyncSender<Batch>,
    /// Take the records and series instead of keeping them in the result.
    records: bool,
    /// Send them on to be written (else they are dropped once the summary has its share).
    write_records: bool,
}

impl ChannelSink {
    fn send(&self, b: Batch) {
        // A writer that stopped on an error has dropped its end; its error is reported
        // when it is joined.
        let _ = self.tx.send(b);
    }
}

impl crate::metrics::RecordSink for ChannelSink {
    fn decisions(&mut self, batch: DecisionLog) {
        self.send(Batch::Decisions(batch));
    }

    fn takes_requests(&self) -> bool {
        self.records
    }

    fn requests(&mut self, first_id: usize, batch: Vec<RequestRec>) {
        if self.write_records {
            self.send(Batch::Requests(first_id, batch));
        }
    }

    fn takes_series(&self) -> bool {
        self.records
    }

    fn series(&mut self, batch: Vec<TsRow>) {
        if self.write_records {
            self.send(Batch::Series(batch));
        }
    }
}

/// Batches queued between the simulation and the writer thread.
const QUEUED_BATCHES: usize = 4;

/// What the writer thread leaves: the hints' scan, the decision files, and, when it wrote
/// them, the requests and time-series files and the plot's points.
type Written = (HintScan, Vec<PathBuf>, Option<(Vec<PathBuf>, SeriesPoints)>);

/// A spinner on stderr naming the phase with the time elapsed (a run has no fraction done
/// to show: the event loop does not know how many events are left), redrawn five times a
/// second; hidden unless `show`.
fn phase_bar(show: bool) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        b.set_style(style);
    }
    b.enable_steady_tick(std::time::Duration::from_millis(200));
    b
}

pub(super) fn cmd_run(a: RunArgs) -> Result<ExitCode> {
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
    let (scenario, workload, effective) = load_scenario(&a.scenario)?;
    check_tool_tables(&a.scenario)?;
    let file = a.scenario.scenario.display().to_string();
    if a.explain {
        super::shared::check_held_audit(&scenario, &workload, &file, "sim run --explain")?;
    }
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
    let tables = a.format.tables(workload.total_requests());
    if a.format == TableFormat::Auto && tables == Tables::Parquet && !a.no_files && !a.quiet {
        eprintln!(
            "note: --format auto: {} planned requests (at least {AUTO_PARQUET_REQUESTS}), so the tables are Parquet; --format csv writes CSV",
            workload.total_requests()
        );
    }
    let seed = scenario.sim.seed;
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let bar = phase_bar((a.progress || !a.quiet) && tty);
    let doing = format!(
        "simulating {} ({} sessions planned)",
        scenario.sim.name,
        workload.sessions.len()
    );
    // Not a terminal (a log file): plain lines, and only when asked for.
    let lines = a.progress && !tty;
    if lines {
        eprintln!("{doing} ...");
    }
    bar.set_message(doing);
    let dir = a.out.clone().unwrap_or_else(|| default_out(&scenario.sim.name));
    // Whole or absent: written into a staging folder (removed unless committed), moved
    // into place when complete.
    let stage = if a.no_files {
        None
    } else {
        Some(crate::atomic::Staging::new(&dir)?)
    };
    let names: Vec<String> = scenario.sim.backends.iter().map(|(n, _)| n.clone()).collect();
    let n = names.len();
    let interval_s = scenario.sim.router.engine_stats_interval.as_secs_f64();
    let started = std::time::Instant::now();
    // The decision audit is streamed (hints read and files written as the run goes) unless
    // --explain needs it whole; the request records and the time series too unless
    // --explain, --timeline or --openmetrics read them whole.
    let (ran, streamed) = if a.explain {
        let ran = crate::sim::run_mode(scenario.sim.clone(), &workload, opts, a.engine.into());
        (ran, None)
    } else {
        let files_dir = stage
            .as_ref()
            .filter(|_| !a.no_decisions)
            .map(|s| s.path().to_path_buf());
        let records = !(a.timeline || a.openmetrics);
        let records_dir = stage.as_ref().filter(|_| records).map(|s| s.path().to_path_buf());
        let write_records = records_dir.is_some();
        let labels = &scenario.sim.labels;
        std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(QUEUED_BATCHES);
            let sessions = &workload.sessions;
            let writer = scope.spawn(move || -> Result<Written> {
                let key = |s: usize| sessions[s].key.as_str();
                let mut scan = HintScan::new(n, interval_s);
                let mut files = files_dir.map(|d| DecisionFiles::create(&d, tables, n)).transpose()?;
                let mut records = records_dir
                    .map(|d| -> Result<_> { Ok((RecordFiles::create(&d, tables, labels)?, SeriesPoints::new(n))) })
                    .transpose()?;
                for batch in rx {
                    match (batch, &mut records) {
                        (Batch::Decisions(batch), _) => {
                            scan.add(&batch);
                            if let Some(f) = &mut files {
                                f.add(&batch, &key)?;
                            }
                        }
                        (Batch::Requests(first, batch), Some((f, _))) => f.add_requests(first, &batch, &key)?,
                        (Batch::Series(rows), Some((f, points))) => {
                            points.add(&rows);
                            f.add_series(&rows)?;
                        }
                        (_, None) => {}
                    }
                }
                let paths = files.map(DecisionFiles::finish).transpose()?.unwrap_or_default();
                let records = records.map(|(f, p)| f.finish().map(|paths| (paths, p))).transpose()?;
                Ok((scan, paths, records))
            });
            let mut sink = ChannelSink {
                tx,
                records,
                write_records,
            };
            let ran = crate::sim::run_streamed(scenario.sim.clone(), &workload, opts, a.engine.into(), &mut sink);
            drop(sink);
            let written = writer
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the thread writing the decision files panicked")));
            (ran, Some(written))
        })
    };
    bar.finish_and_clear();
    if lines {
        eprintln!("simulated in {:.1} s; writing results", started.elapsed().as_secs_f64());
    }
    let (res, wall) = match ran {
        Ok(r) => r,
        Err(e @ SimError::Invariant(..)) => {
            eprintln!("error: {file}: {e}\nreproduce with: sim run {file} --seed {seed} --invariants");
            return Ok(ExitCode::from(1));
        }
        Err(e) => anyhow::bail!("{file}: {e}"),
    };
    let perf = perf_of(wall, res.summary.events, res.summary.requests.arrived);
    let (mut hints, decision_files, record_files) = match streamed {
        Some(w) => {
            let (scan, paths, records) = w?;
            (scan.finish(&names), Some(paths), records)
        }
        None => (crate::hints::hints(&res.decisions, &names, interval_s), None, None),
    };
    hints.extend(crate::hints::share_hints(&res.summary));
    if !a.quiet {
        out!("{}", render(&res.summary, Some(&perf)))?;
        for l in res.summary.replay.iter().flat_map(crate::metrics::fidelity::render) {
            outln!("{l}")?;
        }
        for h in &hints {
            outln!("hint [{}] {}", h.kind, h.message)?;
        }
    }
    if let Some(dir) = &a.save_golden {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let p = golden_path(dir, &res.summary.scenario);
        write_json(&p, &Golden::of(&res.summary, &effective)).with_context(|| format!("writing {}", p.display()))?;
        if !a.quiet {
            outln!("golden: {}", p.display())?;
        }
    }
    if let Some(stage) = stage {
        // The tables and the plot at once (the plot is a few seconds of a long run).
        let (record_paths, points) = record_files.unzip();
        let (files, plots) = rayon::join(
            || match decision_files {
                Some(paths) => write_rest(
                    stage.path(),
                    &res,
                    &effective,
                    &perf,
                    &hints,
                    tables,
                    paths,
                    record_paths,
                ),
                None => write_all_as(stage.path(), &res, &effective, &perf, &hints, tables, !a.no_decisions),
            },
            || {
                let series = match points {
                    Some(p) => BackendSeries::of_points(&res.summary, p),
                    None => BackendSeries::new(&res.summary, &res.series),
                }
                .with_stranded(&res.episodes);
                save(&series, &stage.path().join("timeseries"), a.plot.dpi)
            },
        );
        let mut written = files?;
        written.extend(plots?);
        if a.timeline {
            let p = stage.path().join("timeline.json");
            crate::export::timeline::write(&p, &res).with_context(|| format!("writing {}", p.display()))?;
            written.push(p);
        }
        if a.openmetrics {
            let p = stage.path().join("metrics.om");
            let step_ns = (a.metrics_step * 1000.0).round() as u64 * 1_000_000;
            let s = crate::export::openmetrics::sample(&res, &scenario.sim, step_ns);
            let text = crate::export::openmetrics::openmetrics(&s, a.metrics_epoch);
            crate::atomic::write_file(&p, text.as_bytes()).with_context(|| format!("writing {}", p.display()))?;
            written.push(p);
        }
        if a.explain {
            let src = Source::parse(&effective, &file, &res.summary.scenario)?;
            let x = explanation(&res, &scenario, &workload, &src, &a.explain_opts)?;
            written.extend(write_explanation(stage.path(), &x)?);
            if !a.quiet {
                out!("\n{}", crate::explain::render(&x))?;
            }
        }
        stage.commit()?;
        written.push(dir.join(crate::atomic::MANIFEST));
        if !a.quiet {
            outln!("wrote {}/{{{}}}", dir.display(), file_names(&written))?;
        }
    } else if a.explain {
        let src = Source::parse(&effective, &file, &res.summary.scenario)?;
        let x = explanation(&res, &scenario, &workload, &src, &a.explain_opts)?;
        if !a.quiet {
            out!("\n{}", crate::explain::render(&x))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
