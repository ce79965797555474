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
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

pub mod columnar;
pub mod openmetrics;
pub mod timeline;

use crate::sim::RunResult;
use crate::time::{SimTime, ns_to_secs};

fn t(x: SimTime) -> String {
    format!("{}", ns_to_secs(x.0))
}

/// Most bytes of CSV rows formatted ahead of a result file at once; counted by the
/// memory pre-flight (`crate::preflight::WRITE_BYTES`).
pub const WINDOW_BYTES: usize = 32 << 20;

/// Appends rows `0..n` (each by `row`, which ends its record, about `row_bytes` long) to
/// `out`: blocks of rows are formatted on all threads into memory and appended in order,
/// so the bytes are exactly those of a sequential write (a csv writer keeps no state
/// across records). The window formatted ahead holds about [`WINDOW_BYTES`] whatever the
/// row width (a wide `decisions.csv` row of a thousand backends is ~60 KB).
fn write_rows(
    out: &mut impl Write,
    n: usize,
    row_bytes: usize,
    row: impl Fn(&mut csv::Writer<Vec<u8>>, &mut Fields, usize) -> csv::Result<()> + Sync,
) -> Result<()> {
    use rayon::prelude::*;
    let threads = rayon::current_num_threads().max(1);
    // 4,096 rows a block, 4 blocks a thread, unless the rows are wide.
    let fit = (WINDOW_BYTES / row_bytes.max(1) / (4 * threads)).max(1);
    let block = fit.min(4096);
    let window = block * 4 * threads;
    let mut start = 0;
    while start < n {
        let end = (start + window).min(n);
        let blocks: Vec<Result<Vec<u8>>> = (start..end)
            .step_by(block)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|a| {
                let mut bw = csv::Writer::from_writer(Vec::new());
                let mut f = Fields::default();
                for i in a..(a + block).min(end) {
                    row(&mut bw, &mut f, i)?;
                }
                bw.into_inner().map_err(|e| anyhow::anyhow!("{}", e.error()))
            })
            .collect();
        for b in blocks {
            out.write_all(&b?)?;
        }
        start = end;
    }
    Ok(())
}

/// Formats CSV fields into one reused buffer (no allocation per field).
#[derive(Default)]
struct Fields {
    buf: String,
}

impl Fields {
    fn num<W: Write>(&mut self, w: &mut csv::Writer<W>, args: std::fmt::Arguments) -> csv::Result<()> {
        use std::fmt::Write as _;
        self.buf.clear();
        let _ = self.buf.write_fmt(args);
        w.write_field(&self.buf)
    }

    /// A time in seconds, or an empty field.
    fn time<W: Write>(&mut self, w: &mut csv::Writer<W>, x: Option<SimTime>) -> csv::Result<()> {
        match x {
            Some(x) => self.num(w, format_args!("{}", ns_to_secs(x.0))),
            None => w.write_field(""),
        }
    }

    /// `b - a` in seconds, or an empty field.
    fn diff<W: Write>(&mut self, w: &mut csv::Writer<W>, a: Option<SimTime>, b: Option<SimTime>) -> csv::Result<()> {
        match (a, b) {
            (Some(a), Some(b)) => self.num(w, format_args!("{}", ns_to_secs((b - a).0))),
            _ => w.write_field(""),
        }
    }
}

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

/// How a run's tables (requests, time series, decisions) are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tables {
    /// `*.csv`, the default: readable by anything, diffable, committed under `results/`.
    #[default]
    Csv,
    /// `*.parquet` ([`columnar`]): typed, zstd-compressed columns for large runs.
    Parquet,
}

/// Writes all files into `dir`, tables as CSV; returns their paths.
pub fn write_all(
    dir: &Path,
    res: &RunResult,
    scenario_toml: &str,
    perf: &Perf,
    hints: &[crate::hints::Hint],
    decisions: bool,
) -> Result<Vec<PathBuf>> {
    write_all_as(dir, res, scenario_toml, perf, hints, Tables::Csv, decisions)
}

/// Writes all files into `dir`, tables as `tables` says; returns their paths.
pub fn write_all_as(
    dir: &Path,
    res: &RunResult,
    scenario_toml: &str,
    perf: &Perf,
    hints: &[crate::hints::Hint],
    tables: Tables,
    decisions: bool,
) -> Result<Vec<PathBuf>> {
    fs::create_dir_all(dir).with_context(|| format!("creating results folder {}", dir.display()))?;
    let mut written = Vec::new();
    let mut file = |name: &str, f: &dyn Fn(&Path) -> Result<()>| -> Result<()> {
        let p = dir.join(name);
        f(&p).with_context(|| format!("writing {}", p.display()))?;
        written.push(p);
        Ok(())
    };
    file("summary.json", &|p| write_json(p, &res.summary))?;
    // Per-decision files (`--no-decisions` leaves them out: on a 1 M-request run they are
    // most of the output, decisions_long.csv alone about 1 GB).
    let columnar = if tables == Tables::Parquet {
        columnar::write_parquet(dir, res, decisions)?
    } else {
        file("requests.csv", &|p| write_requests(p, res))?;
        file("timeseries.csv", &|p| write_series(p, res))?;
        if decisions {
            file("decisions.csv", &|p| write_decisions(p, res))?;
            file("decisions_long.csv", &|p| write_decisions_long(p, res))?;
        }
        Vec::new()
    };
    file("scenario.toml", &|p| {
        crate::atomic::write_file(p, scenario_toml.as_bytes())
    })?;
    file("hints.json", &|p| write_json(p, &hints))?;
    file("perf.json", &|p| write_json(p, perf))?;
    written.extend(columnar);
    Ok(written)
}

/// Pretty JSON plus a trailing newline.
/// Written through a temporary file and a rename (see [`crate::atomic`]).
pub fn write_json<T: Serialize>(p: &Path, v: &T) -> Result<()> {
    let mut out = serde_json::to_vec_pretty(v)?;
    out.push(b'\n');
    crate::atomic::write_file(p, &out)
}

fn write_requests(p: &Path, res: &RunResult) -> Result<()> {
    let mut out = crate::atomic::Hashed::create(p)?;
    let mut w = csv::Writer::from_writer(&mut out);
    w.write_record([
        "request_id",
        "session",
        "turn",
        "backend",
        "branch",
        "prompt_tokens",
        "output_tokens",
        "cached_tokens",
        "preemptions",
        "t_router_s",
        "t_engine_s",
        "t_admit_s",
        "t_first_token_s",
        "t_first_chunk_s",
        "t_finish_engine_s",
        "t_done_s",
        "t_failed_s",
        "queue_wait_s",
        "ttft_s",
        "e2e_s",
    ])?;
    w.flush()?;
    drop(w);
    write_rows(&mut out, res.requests.len(), 256, |w, f, i| {
        let r = &res.requests[i];
        f.num(w, format_args!("{i}"))?;
        w.write_field(&res.session_keys[r.session.index()])?;
        f.num(w, format_args!("{}", r.turn))?;
        f.num(w, format_args!("{}", r.backend))?;
        w.write_field(r.branch.as_str())?;
        f.num(w, format_args!("{}", r.prompt_tokens))?;
        f.num(w, format_args!("{}", r.output_tokens))?;
        f.num(w, format_args!("{}", r.cached_tokens))?;
        f.num(w, format_args!("{}", r.preemptions))?;
        f.time(w, Some(r.t_router))?;
        for x in [
            r.t_engine,
            r.t_admit,
            r.t_first_token,
            r.t_first_chunk,
            r.t_finish_engine,
            r.t_done,
            r.t_failed,
        ] {
            f.time(w, x)?;
        }
        f.diff(w, r.t_engine, r.t_admit)?;
        f.diff(w, Some(r.t_router), r.t_first_chunk)?;
        f.diff(w, Some(r.t_router), r.t_done)?;
        w.write_record(None::<&[u8]>)
    })?;
    out.finish()?;
    Ok(())
}

fn write_series(p: &Path, res: &RunResult) -> Result<()> {
    let mut out = crate::atomic::Hashed::create(p)?;
    let mut w = csv::Writer::from_writer(&mut out);
    // Group and profile columns only for fleets described with them (a single `[backends]`
    // table keeps its original columns).
    let labelled = res
        .summary
        .backends
        .iter()
        .any(|b| !b.group.is_empty() || !b.profile.is_empty());
    let mut header = vec!["t_s", "backend", "running", "waiting", "kv_used_blocks"];
    if labelled {
        header.extend(["group", "profile"]);
    }
    w.write_record(&header)?;
    for r in &res.series {
        let mut row = vec![
            t(r.t),
            r.backend.to_string(),
            r.running.to_string(),
            r.waiting.to_string(),
            r.kv_used_blocks.to_string(),
        ];
        if labelled && let Some(b) = res.summary.backends.get(r.backend.index()) {
            row.push(b.group.clone());
            row.push(b.profile.clone());
        }
        w.write_record(&row)?;
    }
    w.flush()?;
    drop(w);
    out.finish()?;
    Ok(())
}

fn write_decisions(p: &Path, res: &RunResult) -> Result<()> {
    let log = &res.decisions;
    let mut out = crate::atomic::Hashed::create(p)?;
    let mut w = csv::Writer::from_writer(&mut out);
    let mut header: Vec<String> = [
        "t_s",
        "request_id",
        "session",
        "turn",
        "branch",
        "backend",
        "match_chars",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for i in 0..log.n_backends {
        for col in [
            "listed",
            "view_running",
            "view_waiting",
            "view_age_s",
            "view_window_dispatches",
            "true_outstanding",
        ] {
            header.push(format!("b{i}_{col}"));
        }
    }
    w.write_record(&header)?;
    // One field at a time through a reused buffer: the file has ~100 fields per decision.
    w.flush()?;
    drop(w);
    write_rows(&mut out, log.rows.len(), 128 + 64 * log.n_backends, |w, f, k| {
        let d = &log.rows[k];
        let (view, truth) = log.detail(k);
        f.num(w, format_args!("{}", ns_to_secs(d.t.0)))?;
        f.num(w, format_args!("{}", d.request))?;
        w.write_field(&res.session_keys[d.session.index()])?;
        f.num(w, format_args!("{}", d.turn))?;
        w.write_field(d.branch.as_str())?;
        f.num(w, format_args!("{}", d.backend))?;
        f.num(w, format_args!("{}", d.match_chars))?;
        for (v, tr) in view.iter().zip(truth) {
            write_view(w, f, &v, *tr, d.t)?;
        }
        w.write_record(None::<&[u8]>)
    })?;
    out.finish()?;
    Ok(())
}

/// One backend's view at a decision at `t` and its true outstanding count: `listed,
/// view_running, view_waiting, view_age_s, view_window_dispatches, true_outstanding`.
fn write_view<W: Write>(
    w: &mut csv::Writer<W>,
    f: &mut Fields,
    v: &crate::router::ViewEntry,
    truth: u32,
    t: SimTime,
) -> csv::Result<()> {
    w.write_field(if v.listed { "1" } else { "0" })?;
    match v.engine {
        Some(e) => {
            f.num(w, format_args!("{}", e.running))?;
            f.num(w, format_args!("{}", e.waiting))?;
            f.num(w, format_args!("{}", ns_to_secs((t - e.read_at).0)))?;
        }
        None => {
            for _ in 0..3 {
                w.write_field("")?;
            }
        }
    }
    match v.requests {
        Some(r) => f.num(w, format_args!("{}", r.window_dispatches))?,
        None => w.write_field("")?,
    }
    f.num(w, format_args!("{truth}"))
}

/// `decisions_long.csv`: the view each candidate backend had at each decision, one row per
/// (decision, backend): the same data as `decisions.csv` without its `b{i}_` columns, so
/// `groupby("backend")` works directly.
fn write_decisions_long(p: &Path, res: &RunResult) -> Result<()> {
    let log = &res.decisions;
    let n = log.n_backends;
    let mut out = crate::atomic::Hashed::create(p)?;
    let mut w = csv::Writer::from_writer(&mut out);
    w.write_record([
        "t_s",
        "request_id",
        "branch",
        "backend",
        "picked",
        "listed",
        "view_running",
        "view_waiting",
        "view_age_s",
        "view_window_dispatches",
        "true_outstanding",
    ])?;
    w.flush()?;
    drop(w);
    write_rows(&mut out, log.rows.len() * n, 128, |w, f, k| {
        let (row, b) = (k / n, k % n);
        let d = &log.rows[row];
        let (view, truth) = log.detail(row);
        let (v, tr) = view.iter().zip(truth).nth(b).expect("one view entry per backend");
        f.num(w, format_args!("{}", ns_to_secs(d.t.0)))?;
        f.num(w, format_args!("{}", d.request))?;
        w.write_field(d.branch.as_str())?;
        f.num(w, format_args!("{b}"))?;
        w.write_field(if d.backend.index() == b { "1" } else { "0" })?;
        write_view(w, f, &v, *tr, d.t)?;
        w.write_record(None::<&[u8]>)
    })?;
    out.finish()?;
    Ok(())
}
