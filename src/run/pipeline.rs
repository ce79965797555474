//! `sim run`'s run: a validated scenario staged, simulated and written, step by step.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::counterfactual::{Explain, explained};
use super::files::{Kept, Sampling, tables_and_plot, write_explanation};
use super::stream::{Streamed, Streams};
use crate::check::golden::{Golden, golden_path};
use crate::export::{Output, Perf, Tables, write_json};
use crate::hints::Hint;
use crate::plot::series::SeriesPoints;
use crate::scenario::{Scenario, Source};
use crate::sim::{EngineMode, RunOptions, RunResult, SimError};
use crate::workload::Workload;

/// What a run writes beside its summary (`sim run`'s flags, in the run's terms).
#[derive(Clone, Debug)]
pub struct Options {
    /// The results folder; `None`: no files, the summary only.
    pub out: Option<PathBuf>,
    /// Which event loop runs it.
    pub engine: EngineMode,
    /// Check every invariant after every event.
    pub invariants: bool,
    /// How the tables are written.
    pub tables: Tables,
    /// Write the per-decision tables.
    pub decisions: bool,
    /// Also write `timeline.json`.
    pub timeline: bool,
    /// Also write `metrics.om`, sampled so.
    pub openmetrics: Option<Sampling>,
    /// Also explain the stranded capacity (and write `explain.md`, `explain.json`).
    pub explain: Option<Explain>,
    /// PNG resolution of the time-series plot.
    pub dpi: u32,
    /// What shows on stderr while it runs.
    pub progress: Progress,
}

/// What shows on stderr while a run simulates (never in an output file).
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    /// A spinner naming the phase with the time elapsed.
    pub spinner: bool,
    /// Plain lines (for a log).
    pub lines: bool,
}

impl Progress {
    /// On stderr: on a terminal a spinner unless `quiet` (shown anyway when `asked`), in a
    /// log plain lines only when `asked`.
    pub fn on_stderr(asked: bool, quiet: bool) -> Progress {
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        Progress {
            spinner: (asked || !quiet) && tty,
            lines: asked && !tty,
        }
    }

    /// A spinner on stderr naming the phase with the time elapsed (a run has no fraction
    /// done to show: the event loop does not know how many events are left), redrawn five
    /// times a second; hidden unless [`Progress::spinner`].
    fn bar(self) -> indicatif::ProgressBar {
        if !self.spinner {
            return indicatif::ProgressBar::hidden();
        }
        let b = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
            b.set_style(style);
        }
        b.enable_steady_tick(std::time::Duration::from_millis(200));
        b
    }
}

/// Why a run stopped short of its outputs.
#[derive(Debug)]
pub enum RunError {
    /// The run broke an invariant (a simulator bug).
    Invariant(SimError),
    /// Anything else: input, files, the writer thread.
    Other(anyhow::Error),
}

impl From<anyhow::Error> for RunError {
    fn from(e: anyhow::Error) -> Self {
        RunError::Other(e)
    }
}

/// A run of one validated scenario, from its workload to its results folder.
pub struct Run<'a> {
    scenario: &'a Scenario,
    workload: &'a Workload,
    /// The effective scenario text (`scenario.toml`).
    effective: &'a str,
    /// The scenario file, as messages name it.
    file: &'a str,
    opts: Options,
}

impl<'a> Run<'a> {
    /// A run of `scenario` on `workload`; `effective` is its effective text, `file` names
    /// it in messages.
    pub fn new(
        scenario: &'a Scenario,
        workload: &'a Workload,
        effective: &'a str,
        file: &'a str,
        opts: Options,
    ) -> Run<'a> {
        Run {
            scenario,
            workload,
            effective,
            file,
            opts,
        }
    }

    /// Stages the results folder (whole or absent: removed unless committed) and simulates;
    /// the decision audit is streamed (hints read and files written as the run goes) unless
    /// the explanation needs it whole, the request records and the time series too unless
    /// the explanation, the timeline or OpenMetrics read them whole.
    pub fn simulate(self) -> Result<Simulated<'a>, RunError> {
        let dir = self.opts.out.clone();
        let stage = dir.as_deref().map(crate::atomic::Staging::new).transpose()?;
        let (ran, streamed) = self.with_progress(|| {
            if self.opts.explain.is_some() {
                let sim = self.scenario.sim.clone();
                (
                    super::simulate(sim, self.workload, self.core_options(), self.opts.engine),
                    None,
                )
            } else {
                let (ran, written) = super::stream::simulate(
                    self.scenario,
                    self.workload,
                    self.core_options(),
                    self.opts.engine,
                    self.streams(stage.as_ref().map(crate::atomic::Staging::path)),
                );
                (ran, Some(written))
            }
        });
        let (res, wall) = match ran {
            Ok(r) => r,
            Err(e @ SimError::Invariant(..)) => return Err(RunError::Invariant(e)),
            Err(e) => return Err(anyhow::anyhow!("{}: {e}", self.file).into()),
        };
        let perf = Perf::of(wall, res.summary.events, res.summary.requests.arrived);
        let (hints, kept, points) = self.hints_and_kept(&res, streamed.transpose()?);
        Ok(Simulated {
            run: self,
            stage: stage.zip(dir),
            res,
            perf,
            hints,
            kept,
            points,
        })
    }

    /// The core's options: series only when files are written; the decision audit always
    /// (the health hints read it).
    fn core_options(&self) -> RunOptions {
        RunOptions {
            record_series: self.opts.out.is_some(),
            record_decisions: true,
            check_invariants: self.opts.invariants,
            record_event_log: false,
        }
    }

    /// Where a streamed run's records go, given the staging folder (none: no files).
    fn streams(&self, stage: Option<&Path>) -> Streams {
        let records = !(self.opts.timeline || self.opts.openmetrics.is_some());
        Streams {
            decisions: stage.filter(|_| self.opts.decisions).map(Path::to_path_buf),
            records,
            records_dir: stage.filter(|_| records).map(Path::to_path_buf),
            tables: self.opts.tables,
        }
    }

    /// Runs `simulate` with the phase shown on stderr as [`Options::progress`] says.
    fn with_progress<T>(&self, simulate: impl FnOnce() -> T) -> T {
        let progress = self.opts.progress;
        let bar = progress.bar();
        let doing = format!(
            "simulating {} ({} sessions planned)",
            self.scenario.sim.name,
            self.workload.sessions.len()
        );
        if progress.lines {
            eprintln!("{doing} ...");
        }
        bar.set_message(doing);
        let started = std::time::Instant::now();
        let out = simulate();
        bar.finish_and_clear();
        if progress.lines {
            eprintln!("simulated in {:.1} s; writing results", started.elapsed().as_secs_f64());
        }
        out
    }

    /// The run's health hints, and what of its tables is left to write (with the plot's
    /// points when the writer thread kept them).
    fn hints_and_kept(&self, res: &RunResult, streamed: Option<Streamed>) -> (Vec<Hint>, Kept, Option<SeriesPoints>) {
        let names: Vec<String> = self.scenario.sim.backends.iter().map(|(n, _)| n.clone()).collect();
        let (hints, kept, points) = match streamed {
            Some(s) => {
                let (record_files, points) = s.records.unzip();
                let kept = Kept::Streamed {
                    decision_files: s.decision_files,
                    record_files,
                };
                (s.scan.finish_with(&names, &res.summary), kept, points)
            }
            None => {
                let interval_s = self.scenario.sim.router.engine_stats_interval.as_secs_f64();
                let kept = Kept::Whole {
                    decisions: self.opts.decisions,
                };
                let hints = crate::hints::all_hints(&res.decisions, &names, interval_s, &res.summary);
                (hints, kept, None)
            }
        };
        let mut hints = hints;
        hints.extend(crate::hints::trace_hints(&self.workload.traces, res.summary.sim_time_s));
        (hints, kept, points)
    }
}

/// A run simulated, its results folder staged but not yet written.
pub struct Simulated<'a> {
    run: Run<'a>,
    /// The staging folder and the results folder it becomes.
    stage: Option<(crate::atomic::Staging, PathBuf)>,
    /// The run.
    pub res: RunResult,
    /// Its wall-clock figures.
    pub perf: Perf,
    /// Its health hints.
    pub hints: Vec<Hint>,
    kept: Kept,
    points: Option<SeriesPoints>,
}

impl Simulated<'_> {
    /// Stores the compact golden summary (flattened metrics) in `dir`; returns its path.
    pub fn save_golden(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let p = golden_path(dir, &self.res.summary.scenario);
        write_json(&p, &Golden::of(&self.res.summary, self.run.effective))
            .with_context(|| format!("writing {}", p.display()))?;
        Ok(p)
    }

    /// The explanation of the run's stranded capacity with its counterfactual re-runs, if
    /// [`Options::explain`] asks for it.
    pub fn explanation(&self) -> Result<Option<crate::explain::Explanation>> {
        let Some(how) = &self.run.opts.explain else {
            return Ok(None);
        };
        let Run {
            scenario,
            workload,
            effective,
            file,
            ..
        } = self.run;
        let src = Source::parse(effective, file, &self.res.summary.scenario)?;
        explained(&self.res, scenario, workload, &src, how).map(Some)
    }

    /// Writes the rest of the run's files (and `x`, the explanation, when there is one)
    /// into the staging folder and commits it; returns the results folder and the paths
    /// written, the manifest last (`None`: no files).
    pub fn write(self, x: Option<&crate::explain::Explanation>) -> Result<Option<(PathBuf, Vec<PathBuf>)>> {
        let Some((stage, dir)) = self.stage else {
            return Ok(None);
        };
        let opts = &self.run.opts;
        let out = Output {
            res: &self.res,
            scenario_toml: self.run.effective,
            perf: &self.perf,
            hints: &self.hints,
            tables: opts.tables,
        };
        let at = stage.path();
        let mut written = tables_and_plot(at, &out, self.kept, self.points, opts.dpi)?;
        if opts.timeline {
            written.push(super::files::timeline(at, &out)?);
        }
        if let Some(sampling) = opts.openmetrics {
            written.push(super::files::openmetrics(at, &out, self.run.scenario, sampling)?);
        }
        if let Some(x) = x {
            written.extend(write_explanation(at, x)?);
        }
        stage.commit()?;
        written.push(dir.join(crate::atomic::MANIFEST));
        Ok(Some((dir, written)))
    }
}
