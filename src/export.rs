//! Result files. Export sees only a [`RunResult`], never simulation internals.
//!
//! `summary.json`, `requests.csv`, `timeseries.csv`, `decisions.csv` (wide: one row per
//! decision), `decisions_long.csv` (long: one row per decision and backend, for dataframe
//! tools), `hints.json` and `scenario.toml`
//! (the effective scenario, overrides applied) are byte-identical for the same scenario and
//! seed. `perf.json` holds wall-clock figures and is the only file that varies run to run.
//!
//! May not see: the event loop, backends or the router. Invariant: files are whole or absent
//! (written through `atomic`, hashed as they are written) and byte-identical for the same
//! run.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

pub mod columnar;
pub mod openmetrics;
pub mod sink;
pub mod tables;
pub mod timeline;

pub use tables::{DecisionFiles, RecordFiles};

use crate::sim::RunResult;

/// Most bytes of CSV rows formatted ahead of a result file at once; counted by the
/// memory pre-flight (`crate::preflight::WRITE_BYTES`).
pub const WINDOW_BYTES: usize = 32 << 20;

/// Wall-clock measurements of a run.
#[derive(Clone, Debug, Serialize)]
pub struct Perf {
    /// Wall seconds spent in the event loop.
    pub wall_s: f64,
    /// Events processed.
    pub events: u64,
    /// Events per wall second.
    pub events_per_s: f64,
    /// Requests simulated per wall second.
    pub requests_per_s: f64,
}

impl Perf {
    /// The figures of a loop that took `wall` for `events` events and `requests` requests.
    pub fn of(wall: std::time::Duration, events: u64, requests: u64) -> Perf {
        let wall_s = wall.as_secs_f64().max(1e-9);
        Perf {
            wall_s,
            events,
            events_per_s: events as f64 / wall_s,
            requests_per_s: requests as f64 / wall_s,
        }
    }
}

/// How a run's tables (requests, time series, decisions) are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tables {
    /// `*.csv`, the default: readable by anything, diffable, committed under `results/`.
    #[default]
    Csv,
    /// `*.parquet` ([`columnar`]): typed, zstd-compressed columns for large runs.
    Parquet,
}

/// What a run's files are written from: the finished run and what is known beside it.
#[derive(Clone, Copy)]
pub struct Output<'a> {
    /// The finished run.
    pub res: &'a RunResult,
    /// The effective scenario (overrides applied), written as `scenario.toml`.
    pub scenario_toml: &'a str,
    /// Wall-clock figures, written as `perf.json`.
    pub perf: &'a Perf,
    /// The health hints, written as `hints.json`.
    pub hints: &'a [crate::hints::Hint],
    /// How the tables are written.
    pub tables: Tables,
}

/// Writes all files of `out` into `dir` (the decision tables only if `decisions`); returns
/// their paths.
pub fn write_all(dir: &Path, out: &Output, decisions: bool) -> Result<Vec<PathBuf>> {
    fs::create_dir_all(dir).with_context(|| format!("creating results folder {}", dir.display()))?;
    let res = out.res;
    let decision_files = if decisions {
        let mut f = DecisionFiles::create(dir, out.tables, res.decisions.n_backends)?;
        f.add(&res.decisions, &|s| res.session_keys[s].as_str())?;
        f.finish()?
    } else {
        Vec::new()
    };
    write_rest(dir, out, decision_files, None)
}

/// Writes every file of `out` but the decision tables (`decision_files`, written already,
/// are listed in their place) and, when `record_files` lists them (from
/// [`tables::RecordFiles`]), but the requests and time-series tables; returns the paths of
/// all.
pub fn write_rest(
    dir: &Path,
    out: &Output,
    decision_files: Vec<PathBuf>,
    record_files: Option<Vec<PathBuf>>,
) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let mut file = |name: &str, f: &dyn Fn(&Path) -> Result<()>| -> Result<()> {
        let p = dir.join(name);
        f(&p).with_context(|| format!("writing {}", p.display()))?;
        written.push(p);
        Ok(())
    };
    file("summary.json", &|p| write_json(p, &out.res.summary))?;
    let tables = match record_files {
        Some(paths) => paths,
        None => tables::write_requests_and_series(dir, out.res, out.tables)?,
    };
    file("scenario.toml", &|p| {
        crate::atomic::write_file(p, out.scenario_toml.as_bytes())
    })?;
    file("hints.json", &|p| write_json(p, &out.hints))?;
    file("perf.json", &|p| write_json(p, out.perf))?;
    let mut all = vec![written.remove(0)];
    all.extend(tables);
    all.extend(decision_files);
    all.extend(written);
    Ok(all)
}

/// Pretty JSON plus a trailing newline.
/// Written through a temporary file and a rename (see [`crate::atomic`]).
pub fn write_json<T: Serialize>(p: &Path, v: &T) -> Result<()> {
    let mut out = serde_json::to_vec_pretty(v)?;
    out.push(b'\n');
    crate::atomic::write_file(p, &out)
}
