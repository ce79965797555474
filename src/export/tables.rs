//! The run's tables, `requests`, `timeseries`, `decisions` (wide: one row per decision) and
//! `decisions_long` (one row per decision and backend): ONE column list per table, from
//! which both the CSV header and the Parquet schema come, and one row function per table
//! that pushes a row's values into a [`RowSink`]: [`CsvSink`] formats them as CSV,
//! [`super::columnar::ParquetSink`] encodes them as Parquet columns. So the two formats
//! cannot drift apart, and a table can be written as its rows are produced
//! ([`DecisionFiles`] takes the decision audit batch by batch as a run streams it).
//!
//! Owns: the columns of the run tables and the CSV encoding. Invariant: a table's bytes
//! depend only on its rows (not on how they were batched, nor on the thread count).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::Tables;
use super::columnar::ParquetSink;
use super::sink::{Column, Kind, RowSink};
use crate::atomic::Hashed;
use crate::backend::Label;
use crate::metrics::{DecisionLog, RequestRec, TsRow};
use crate::sim::RunResult;
use crate::time::{SimTime, ns_to_secs};

fn secs(x: SimTime) -> f64 {
    ns_to_secs(x.0)
}

fn diff(a: Option<SimTime>, b: Option<SimTime>) -> Option<f64> {
    Some(ns_to_secs((b? - a?).0))
}

/// `requests`' columns.
pub fn requests_schema() -> Vec<Column> {
    use Kind::*;
    let mut c = vec![
        Column::new("request_id", Int, false),
        Column::new("session", Str, false),
        Column::new("turn", Int, false),
        Column::new("backend", Int, false),
        Column::new("branch", Str, false),
        Column::new("prompt_tokens", Int, false),
        Column::new("output_tokens", Int, false),
        Column::new("cached_tokens", Int, false),
        Column::new("preemptions", Int, false),
        Column::new("t_router_s", Float, false),
    ];
    for n in [
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
    ] {
        c.push(Column::new(n, Float, true));
    }
    c
}

/// Pushes request `i`'s row.
pub fn request_row(res: &RunResult, i: usize, s: &mut dyn RowSink) -> Result<()> {
    request_row_of(
        i,
        &res.requests[i],
        &res.session_keys[res.requests[i].session.index()],
        s,
    )
}

/// Pushes the row of request `id`, record `r`, of the session keyed `session`.
pub fn request_row_of(id: usize, r: &RequestRec, session: &str, s: &mut dyn RowSink) -> Result<()> {
    s.int(Some(id as i64));
    s.str(session);
    s.int(Some(i64::from(r.turn)));
    s.int(Some(r.backend.index() as i64));
    s.str(r.branch.as_str());
    for x in [r.prompt_tokens, r.output_tokens, r.cached_tokens, r.preemptions] {
        s.int(Some(i64::from(x)));
    }
    s.float(Some(secs(r.t_router)));
    for x in [
        r.t_engine,
        r.t_admit,
        r.t_first_token,
        r.t_first_chunk,
        r.t_finish_engine,
        r.t_done,
        r.t_failed,
    ] {
        s.float(x.map(secs));
    }
    s.float(diff(r.t_engine, r.t_admit));
    s.float(diff(Some(r.t_router), r.t_first_chunk));
    s.float(diff(Some(r.t_router), r.t_done));
    s.end_row()
}

/// Whether `timeseries` has its `group` and `profile` columns (fleets described with them;
/// a single `[backends]` table keeps the plain columns).
pub fn labelled(res: &RunResult) -> bool {
    res.summary
        .backends
        .iter()
        .any(|b| !b.group.is_empty() || !b.profile.is_empty())
}

/// `timeseries`' columns.
pub fn series_schema(labelled: bool) -> Vec<Column> {
    use Kind::*;
    let mut c = vec![
        Column::new("t_s", Float, false),
        Column::new("backend", Int, false),
        Column::new("running", Int, false),
        Column::new("waiting", Int, false),
        Column::new("kv_used_blocks", Int, false),
    ];
    if labelled {
        c.push(Column::new("group", Str, false));
        c.push(Column::new("profile", Str, false));
    }
    c
}

/// Pushes time-series row `i`.
pub fn series_row(res: &RunResult, labelled: bool, i: usize, s: &mut dyn RowSink) -> Result<()> {
    let r = &res.series[i];
    let label = labelled.then(|| {
        res.summary
            .backends
            .get(r.backend.index())
            .map_or(("", ""), |b| (b.group.as_str(), b.profile.as_str()))
    });
    series_row_of(r, label, s)
}

/// Pushes time-series row `r`, with its backend's (group, profile) when the table is
/// [`labelled`].
pub fn series_row_of(r: &TsRow, label: Option<(&str, &str)>, s: &mut dyn RowSink) -> Result<()> {
    s.float(Some(secs(r.t)));
    s.int(Some(r.backend.index() as i64));
    for x in [r.running, r.waiting, r.kv_used_blocks] {
        s.int(Some(i64::from(x)));
    }
    if let Some((group, profile)) = label {
        s.str(group);
        s.str(profile);
    }
    s.end_row()
}

/// The per-backend view columns, in order (`decisions` prefixes them with `b{i}_`).
const VIEW_COLUMNS: [(&str, Kind, bool); 6] = [
    ("listed", Kind::Int, false),
    ("view_running", Kind::Int, true),
    ("view_waiting", Kind::Int, true),
    ("view_age_s", Kind::Float, true),
    ("view_window_dispatches", Kind::Int, true),
    ("true_outstanding", Kind::Int, false),
];

/// One backend's view at a decision at `t` and its true outstanding count, as
/// [`VIEW_COLUMNS`].
fn push_view(s: &mut dyn RowSink, v: &crate::router::ViewEntry, truth: u32, t: SimTime) {
    s.int(Some(i64::from(v.listed)));
    s.int(v.engine.map(|e| i64::from(e.running)));
    s.int(v.engine.map(|e| i64::from(e.waiting)));
    s.float(v.engine.map(|e| ns_to_secs((t - e.read_at).0)));
    s.int(v.requests.map(|r| i64::from(r.window_dispatches)));
    s.int(Some(i64::from(truth)));
}

/// `decisions`' columns (wide: one group of view columns per backend).
pub fn decisions_schema(n_backends: usize) -> Vec<Column> {
    use Kind::*;
    let mut c = vec![
        Column::new("t_s", Float, false),
        Column::new("request_id", Int, false),
        Column::new("session", Str, false),
        Column::new("turn", Int, false),
        Column::new("branch", Str, false),
        Column::new("backend", Int, false),
        Column::new("match_chars", Int, false),
    ];
    for i in 0..n_backends {
        for (name, kind, nullable) in VIEW_COLUMNS {
            c.push(Column::new(format!("b{i}_{name}"), kind, nullable));
        }
    }
    c
}

/// Pushes decision `k` of `log` (`key` names session ids).
pub fn decision_row<'k>(
    log: &DecisionLog,
    key: &(dyn Fn(usize) -> &'k str + Sync),
    k: usize,
    s: &mut dyn RowSink,
) -> Result<()> {
    let d = &log.rows[k];
    let (view, truth) = log.detail(k);
    s.float(Some(secs(d.t)));
    s.int(Some(d.request.index() as i64));
    s.str(key(d.session.index()));
    s.int(Some(i64::from(d.turn)));
    s.str(d.branch.as_str());
    s.int(Some(d.backend.index() as i64));
    s.int(Some(i64::try_from(d.match_chars).unwrap_or(i64::MAX)));
    for (v, tr) in view.iter().zip(truth) {
        push_view(s, &v, *tr, d.t);
    }
    s.end_row()
}

/// `decisions_long`'s columns: one row per (decision, backend), the same data as
/// `decisions` without its `b{i}_` columns, so `groupby("backend")` works directly.
pub fn decisions_long_schema() -> Vec<Column> {
    use Kind::*;
    let mut c = vec![
        Column::new("t_s", Float, false),
        Column::new("request_id", Int, false),
        Column::new("branch", Str, false),
        Column::new("backend", Int, false),
        Column::new("picked", Int, false),
    ];
    for (name, kind, nullable) in VIEW_COLUMNS {
        c.push(Column::new(name, kind, nullable));
    }
    c
}

/// Pushes row `k` of `decisions_long`: decision `k / n`, backend `k % n`.
pub fn decision_long_row(log: &DecisionLog, k: usize, s: &mut dyn RowSink) -> Result<()> {
    let n = log.n_backends;
    let (row, b) = (k / n, k % n);
    let d = &log.rows[row];
    let (view, truth) = log.detail(row);
    s.float(Some(secs(d.t)));
    s.int(Some(d.request.index() as i64));
    s.str(d.branch.as_str());
    s.int(Some(b as i64));
    s.int(Some(i64::from(d.backend.index() == b)));
    push_view(s, &view.get(b), truth[b], d.t);
    s.end_row()
}

/// CSV rows formatted into memory (no header): a block of a [`CsvSink`]'s file.
pub struct CsvRows {
    w: csv::Writer<Vec<u8>>,
    /// Reused for numbers (no allocation per field).
    buf: String,
    columns: usize,
    next: usize,
}

impl CsvRows {
    /// An empty block of rows of `columns` fields.
    pub fn new(columns: usize) -> CsvRows {
        CsvRows {
            w: csv::Writer::from_writer(Vec::new()),
            buf: String::new(),
            columns,
            next: 0,
        }
    }

    fn field(&mut self, f: &str) {
        self.next += 1;
        // Writing into a Vec cannot fail.
        let _ = self.w.write_field(f);
    }

    fn number(&mut self, args: std::fmt::Arguments) {
        use std::fmt::Write as _;
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let _ = buf.write_fmt(args);
        self.field(&buf);
        self.buf = buf;
    }

    /// The bytes formatted so far (whole records), leaving the block empty.
    fn take(&mut self) -> Result<Vec<u8>> {
        let w = std::mem::replace(&mut self.w, csv::Writer::from_writer(Vec::new()));
        w.into_inner().map_err(|e| anyhow::anyhow!("{}", e.error()))
    }

    fn len(&self) -> usize {
        self.w.get_ref().len()
    }
}

impl RowSink for CsvRows {
    fn int(&mut self, v: Option<i64>) {
        match v {
            Some(x) => self.number(format_args!("{x}")),
            None => self.field(""),
        }
    }

    fn float(&mut self, v: Option<f64>) {
        match v {
            Some(x) => self.number(format_args!("{x}")),
            None => self.field(""),
        }
    }

    fn str(&mut self, v: &str) {
        self.field(v);
    }

    fn end_row(&mut self) -> Result<()> {
        anyhow::ensure!(
            self.next == self.columns,
            "a row of {} values for {} columns",
            self.next,
            self.columns
        );
        self.next = 0;
        self.w.write_record(None::<&[u8]>)?;
        Ok(())
    }

    fn finish(self) -> Result<()> {
        anyhow::ensure!(self.next == 0, "a row left unfinished");
        Ok(())
    }
}

/// Bytes a [`CsvSink`] formats before it hands them to its file.
const CSV_FLUSH_BYTES: usize = 1 << 20;

/// A CSV file written row by row (header from the column list, then the rows, quoted only
/// where needed, an empty field for a null), hashed as it is written.
pub struct CsvSink {
    out: Hashed,
    rows: CsvRows,
}

impl CsvSink {
    /// Creates (truncates) `path` and writes the header of `schema`.
    pub fn create(path: &Path, schema: &[Column]) -> Result<CsvSink> {
        let mut out = Hashed::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut head = csv::Writer::from_writer(Vec::new());
        head.write_record(schema.iter().map(|c| c.name.as_str()))?;
        out.write_all(&head.into_inner().map_err(|e| anyhow::anyhow!("{}", e.error()))?)?;
        Ok(CsvSink {
            out,
            rows: CsvRows::new(schema.len()),
        })
    }

    /// Appends rows formatted elsewhere ([`CsvRows`] of the same columns).
    fn append(&mut self, block: &mut CsvRows) -> Result<()> {
        self.flush()?;
        self.out.write_all(&block.take()?)?;
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let bytes = self.rows.take()?;
        self.out.write_all(&bytes)?;
        Ok(())
    }
}

impl RowSink for CsvSink {
    fn int(&mut self, v: Option<i64>) {
        self.rows.int(v);
    }

    fn float(&mut self, v: Option<f64>) {
        self.rows.float(v);
    }

    fn str(&mut self, v: &str) {
        self.rows.str(v);
    }

    fn end_row(&mut self) -> Result<()> {
        self.rows.end_row()?;
        if self.rows.len() >= CSV_FLUSH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<()> {
        anyhow::ensure!(self.rows.next == 0, "a row left unfinished");
        self.flush()?;
        self.out.finish()?;
        Ok(())
    }
}

/// One table's file being written, in either format.
pub enum TableFile {
    /// `NAME.csv`.
    Csv(CsvSink),
    /// `NAME.parquet`.
    Parquet(ParquetSink),
}

impl TableFile {
    /// Creates `dir/NAME.csv` or `dir/NAME.parquet` for the columns of `schema`; returns it
    /// with its path.
    pub fn create(dir: &Path, name: &str, tables: Tables, schema: &[Column]) -> Result<(TableFile, PathBuf)> {
        Ok(match tables {
            Tables::Csv => {
                let p = dir.join(format!("{name}.csv"));
                (TableFile::Csv(CsvSink::create(&p, schema)?), p)
            }
            Tables::Parquet => {
                let p = dir.join(format!("{name}.parquet"));
                (TableFile::Parquet(ParquetSink::create(&p, schema)?), p)
            }
        })
    }

    /// Appends rows `0..n`, each pushed by `row`. CSV rows (about `row_bytes` long) are
    /// formatted on all threads in blocks and appended in order, so the bytes are exactly
    /// those of a sequential write; the window formatted ahead holds about
    /// [`super::WINDOW_BYTES`] whatever the row width (a wide `decisions` row of a thousand
    /// backends is ~60 KB).
    pub fn rows(
        &mut self,
        n: usize,
        row_bytes: usize,
        row: impl Fn(&mut dyn RowSink, usize) -> Result<()> + Sync,
    ) -> Result<()> {
        match self {
            TableFile::Parquet(s) => (0..n).try_for_each(|i| row(s, i)),
            TableFile::Csv(s) => {
                use rayon::prelude::*;
                let columns = s.rows.columns;
                let threads = rayon::current_num_threads().max(1);
                // 4,096 rows a block, 4 blocks a thread, unless the rows are wide.
                let block = (super::WINDOW_BYTES / row_bytes.max(1) / (4 * threads)).clamp(1, 4096);
                let window = block * 4 * threads;
                let mut start = 0;
                while start < n {
                    let end = (start + window).min(n);
                    let blocks: Vec<Result<CsvRows>> = (start..end)
                        .step_by(block)
                        .collect::<Vec<_>>()
                        .into_par_iter()
                        .map(|a| {
                            let mut b = CsvRows::new(columns);
                            for i in a..(a + block).min(end) {
                                row(&mut b, i)?;
                            }
                            Ok(b)
                        })
                        .collect();
                    for b in blocks {
                        s.append(&mut b?)?;
                    }
                    start = end;
                }
                Ok(())
            }
        }
    }

    /// Completes the file.
    pub fn finish(self) -> Result<()> {
        match self {
            TableFile::Csv(s) => s.finish(),
            TableFile::Parquet(s) => s.finish(),
        }
    }
}

/// `decisions` and `decisions_long` written as the decision audit arrives, batch by batch
/// (a whole log is one batch): the bytes are the same however it is cut.
pub struct DecisionFiles {
    wide: TableFile,
    long: TableFile,
    paths: [PathBuf; 2],
}

impl DecisionFiles {
    /// Creates both files in `dir` for a fleet of `n_backends`.
    pub fn create(dir: &Path, tables: Tables, n_backends: usize) -> Result<DecisionFiles> {
        let (wide, p1) = TableFile::create(dir, "decisions", tables, &decisions_schema(n_backends))?;
        let (long, p2) = TableFile::create(dir, "decisions_long", tables, &decisions_long_schema())?;
        Ok(DecisionFiles {
            wide,
            long,
            paths: [p1, p2],
        })
    }

    /// Appends the decisions of `log` (`key` names session ids), both files at once.
    pub fn add<'k>(&mut self, log: &DecisionLog, key: &(dyn Fn(usize) -> &'k str + Sync)) -> Result<()> {
        let n = log.n_backends;
        let (wide, long) = (&mut self.wide, &mut self.long);
        let paths = &self.paths;
        let (a, b) = rayon::join(
            || {
                wide.rows(log.rows.len(), 128 + 64 * n, |s, k| decision_row(log, key, k, s))
                    .with_context(|| format!("writing {}", paths[0].display()))
            },
            || {
                long.rows(log.rows.len() * n, 128, |s, k| decision_long_row(log, k, s))
                    .with_context(|| format!("writing {}", paths[1].display()))
            },
        );
        a.and(b)
    }

    /// Completes both files; returns their paths.
    pub fn finish(self) -> Result<Vec<PathBuf>> {
        let [p1, p2] = self.paths;
        self.wide
            .finish()
            .with_context(|| format!("writing {}", p1.display()))?;
        self.long
            .finish()
            .with_context(|| format!("writing {}", p2.display()))?;
        Ok(vec![p1, p2])
    }
}

/// `requests` and `timeseries` written as a run hands out its records and rows, batch by
/// batch (the same bytes as [`write_requests_and_series`] of the kept records).
pub struct RecordFiles {
    requests: TableFile,
    series: TableFile,
    /// Per backend (group, profile), when the series is [`labelled`].
    labels: Option<Vec<(String, String)>>,
    paths: [PathBuf; 2],
}

impl RecordFiles {
    /// Creates both files in `dir` for a fleet labelled `labels` (a backend's group and
    /// profile, as the run's summary will list them).
    pub fn create(dir: &Path, tables: Tables, labels: &[Label]) -> Result<RecordFiles> {
        let labelled = labels.iter().any(|l| !l.group.is_empty() || !l.profile.is_empty());
        let (requests, p1) = TableFile::create(dir, "requests", tables, &requests_schema())?;
        let (series, p2) = TableFile::create(dir, "timeseries", tables, &series_schema(labelled))?;
        Ok(RecordFiles {
            requests,
            series,
            labels: labelled.then(|| labels.iter().map(|l| (l.group.clone(), l.profile.clone())).collect()),
            paths: [p1, p2],
        })
    }

    /// Appends the records of requests `first_id..` (`key` names session ids).
    pub fn add_requests<'k>(
        &mut self,
        first_id: usize,
        batch: &[RequestRec],
        key: &(dyn Fn(usize) -> &'k str + Sync),
    ) -> Result<()> {
        self.requests
            .rows(batch.len(), 256, |s, i| {
                let r = &batch[i];
                request_row_of(first_id + i, r, key(r.session.index()), s)
            })
            .with_context(|| format!("writing {}", self.paths[0].display()))
    }

    /// Appends time-series rows.
    pub fn add_series(&mut self, rows: &[TsRow]) -> Result<()> {
        let labels = self.labels.as_deref();
        self.series
            .rows(rows.len(), 64, |s, i| {
                let r = &rows[i];
                let label = labels.map(|l| {
                    l.get(r.backend.index())
                        .map_or(("", ""), |(g, p)| (g.as_str(), p.as_str()))
                });
                series_row_of(r, label, s)
            })
            .with_context(|| format!("writing {}", self.paths[1].display()))
    }

    /// Completes both files; returns their paths.
    pub fn finish(self) -> Result<Vec<PathBuf>> {
        let [p1, p2] = self.paths;
        self.requests
            .finish()
            .with_context(|| format!("writing {}", p1.display()))?;
        self.series
            .finish()
            .with_context(|| format!("writing {}", p2.display()))?;
        Ok(vec![p1, p2])
    }
}

/// Writes `requests` and `timeseries` of a finished run into `dir`; returns their paths.
pub fn write_requests_and_series(dir: &Path, res: &RunResult, tables: Tables) -> Result<Vec<PathBuf>> {
    let lab = labelled(res);
    let (a, b) = rayon::join(
        || -> Result<PathBuf> {
            let (mut f, p) = TableFile::create(dir, "requests", tables, &requests_schema())?;
            f.rows(res.requests.len(), 256, |s, i| request_row(res, i, s))
                .and_then(|()| f.finish())
                .with_context(|| format!("writing {}", p.display()))?;
            Ok(p)
        },
        || -> Result<PathBuf> {
            let (mut f, p) = TableFile::create(dir, "timeseries", tables, &series_schema(lab))?;
            f.rows(res.series.len(), 64, |s, i| series_row(res, lab, i, s))
                .and_then(|()| f.finish())
                .with_context(|| format!("writing {}", p.display()))?;
            Ok(p)
        },
    );
    Ok(vec![a?, b?])
}
