//! A finished run's files: the tables, summary, scenario, hints and wall-clock figures
//! with the time-series plot beside them, and the optional timeline, OpenMetrics and
//! explanation files.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::export::{Output, write_all, write_json, write_rest};
use crate::plot::series::{BackendSeries, SeriesPoints};
use crate::scenario::Scenario;

/// How `metrics.om` samples the run.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    /// Sampling interval (a scrape interval), nanoseconds.
    pub step_ns: u64,
    /// Unix time, seconds, of simulated time zero.
    pub epoch_s: u64,
}

/// Writes the files of `out` into `dir` (the decision tables only if `decisions`) and, at
/// the same time, the time-series plot at `dpi`; returns their paths.
pub fn write_files(dir: &Path, out: &Output, decisions: bool, dpi: u32) -> Result<Vec<PathBuf>> {
    tables_and_plot(dir, out, Kept::Whole { decisions }, None, dpi)
}

/// What of a run's tables is left to write.
pub(super) enum Kept {
    /// The run kept its records whole: every table (the decision tables only if
    /// `decisions`).
    Whole {
        /// Write the decision tables.
        decisions: bool,
    },
    /// The run streamed them: its writer thread wrote `decision_files` and, when listed,
    /// `record_files` (the requests and time-series tables).
    Streamed {
        /// The decision tables written (none if not asked for).
        decision_files: Vec<PathBuf>,
        /// The requests and time-series tables written, if they were.
        record_files: Option<Vec<PathBuf>>,
    },
}

/// The tables and the plot at once (the plot is a few seconds of a long run), the plot
/// from `points` when the run streamed its series.
pub(super) fn tables_and_plot(
    dir: &Path,
    out: &Output,
    kept: Kept,
    points: Option<SeriesPoints>,
    dpi: u32,
) -> Result<Vec<PathBuf>> {
    let (files, plots) = rayon::join(
        || match kept {
            Kept::Whole { decisions } => write_all(dir, out, decisions),
            Kept::Streamed {
                decision_files,
                record_files,
            } => write_rest(dir, out, decision_files, record_files),
        },
        || {
            let series = match points {
                Some(p) => BackendSeries::of_points(&out.res.summary, p),
                None => BackendSeries::new(&out.res.summary, &out.res.series),
            }
            .with_stranded(&out.res.episodes);
            crate::plot::save(&series, &dir.join("timeseries"), dpi)
        },
    );
    let mut written = files?;
    written.extend(plots?);
    Ok(written)
}

/// Writes `timeline.json` into `dir`; returns its path.
pub(super) fn timeline(dir: &Path, out: &Output) -> Result<PathBuf> {
    let p = dir.join("timeline.json");
    crate::export::timeline::write(&p, out.res).with_context(|| format!("writing {}", p.display()))?;
    Ok(p)
}

/// Writes `metrics.om` into `dir`, sampled as `sampling` says; returns its path.
pub(super) fn openmetrics(dir: &Path, out: &Output, scenario: &Scenario, sampling: Sampling) -> Result<PathBuf> {
    let p = dir.join("metrics.om");
    let s = crate::export::openmetrics::sample(out.res, &scenario.sim, sampling.step_ns);
    let text = crate::export::openmetrics::openmetrics(&s, sampling.epoch_s);
    crate::atomic::write_file(&p, text.as_bytes()).with_context(|| format!("writing {}", p.display()))?;
    Ok(p)
}

/// Writes `explain.md` and `explain.json` into `dir`; returns their paths.
pub fn write_explanation(dir: &Path, x: &crate::explain::Explanation) -> Result<Vec<PathBuf>> {
    let md = dir.join("explain.md");
    crate::atomic::write_file(&md, crate::explain::render(x).as_bytes())?;
    let js = dir.join("explain.json");
    write_json(&js, x).with_context(|| format!("writing {}", js.display()))?;
    Ok(vec![md, js])
}
