//! Columnar result files (`sim run --format parquet`): `requests.parquet`,
//! `timeseries.parquet`, `decisions.parquet` and `decisions_long.parquet`, the same
//! columns, in the same order and with the same values as their CSV twins (times in
//! seconds as `DOUBLE`, counts and ids as `INT64`, names as UTF-8 strings; an empty CSV
//! field is a null), compressed with zstd.
//!
//! Each file is written through a [`RowSink`]: the caller pushes a row's values in column
//! order and ends the row; the sink keeps one row group's columns in memory (at most about
//! [`ROW_GROUP_BYTES`]), encodes and writes them when the group is full, and writes the
//! footer on [`RowSink::finish`]. So a caller may push rows as a run produces them.
//!
//! Owns: the column schemas of the run files and their Parquet encoding. Invariant: the
//! bytes depend only on the rows (no clock, no thread count), and a file is hashed as it
//! is written for the run's manifest, like every other run file.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use parquet::basic::{Compression, Encoding, LogicalType, Repetition, Type as Physical, ZstdLevel};
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::{ColumnPath, Type};

use crate::atomic::Hashed;
use crate::sim::RunResult;
use crate::time::{SimTime, ns_to_secs};

/// The value type of a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Counts, ids, flags (`INT64`).
    Int,
    /// Seconds and other reals (`DOUBLE`).
    Float,
    /// Names (`BYTE_ARRAY`, UTF-8).
    Str,
}

/// One column: name, type, and whether a row may leave it empty (null).
#[derive(Clone, Debug)]
pub struct Column {
    /// Column name (the CSV header's).
    pub name: String,
    /// Value type.
    pub kind: Kind,
    /// Whether values may be missing.
    pub nullable: bool,
}

impl Column {
    fn new(name: impl Into<String>, kind: Kind, nullable: bool) -> Column {
        Column {
            name: name.into(),
            kind,
            nullable,
        }
    }
}

/// Receives a table row by row: values in column order, then [`RowSink::end_row`];
/// [`RowSink::finish`] completes the file.
pub trait RowSink {
    /// The next value of an `Int` column (`None`: null).
    fn int(&mut self, v: Option<i64>);
    /// The next value of a `Float` column (`None`: null).
    fn float(&mut self, v: Option<f64>);
    /// The next value of a `Str` column.
    fn str(&mut self, v: &str);
    /// Ends the row (every column has had its value).
    fn end_row(&mut self) -> Result<()>;
    /// Writes what is buffered and completes the file.
    fn finish(self) -> Result<()>;
}

/// Most bytes of values a [`ParquetSink`] buffers before it writes a row group (8 bytes a
/// value): about 380,000 rows of `decisions_long`, 40,000 of a 16-backend `decisions`.
/// The four tables are written at once, so a run holds four groups at a time.
pub const ROW_GROUP_BYTES: usize = 32 << 20;

/// zstd level of the columns: level 3, zstd's own default, is within a few percent of the
/// size of higher levels on these files at a fraction of their time.
const ZSTD_LEVEL: i32 = 3;

enum Values {
    Int(Vec<i64>),
    Float(Vec<f64>),
    Str(Vec<ByteArray>),
}

struct ColumnBuf {
    values: Values,
    /// Definition levels of a nullable column (1 present, 0 null); empty otherwise.
    defs: Vec<i16>,
    nullable: bool,
}

/// A Parquet file written row by row, one row group per [`ROW_GROUP_BYTES`] of values.
pub struct ParquetSink {
    writer: SerializedFileWriter<Hashed>,
    columns: Vec<ColumnBuf>,
    /// The column the next value goes to.
    next: usize,
    rows: usize,
    rows_per_group: usize,
}

impl ParquetSink {
    /// Creates (truncates) `path` with the given columns.
    pub fn create(path: &Path, schema: &[Column]) -> Result<ParquetSink> {
        let fields = schema
            .iter()
            .map(|c| {
                let (physical, logical) = match c.kind {
                    Kind::Int => (Physical::INT64, None),
                    Kind::Float => (Physical::DOUBLE, None),
                    Kind::Str => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
                };
                let repetition = if c.nullable {
                    Repetition::OPTIONAL
                } else {
                    Repetition::REQUIRED
                };
                Type::primitive_type_builder(&c.name, physical)
                    .with_repetition(repetition)
                    .with_logical_type(logical)
                    .build()
                    .map(Arc::new)
            })
            .collect::<parquet::errors::Result<Vec<_>>>()?;
        let root = Arc::new(Type::group_type_builder("schema").with_fields(fields).build()?);
        let mut props = WriterProperties::builder().set_compression(Compression::ZSTD(ZstdLevel::try_new(ZSTD_LEVEL)?));
        // Reals (times, ages) are nearly all distinct: a dictionary would only be built to
        // be dropped, and splitting their bytes into streams lets zstd find the repeated
        // exponents and leading digits.
        for c in schema.iter().filter(|c| c.kind == Kind::Float) {
            let path = ColumnPath::from(c.name.as_str());
            props = props
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path, Encoding::BYTE_STREAM_SPLIT);
        }
        let props = props.build();
        let out = Hashed::create(path).with_context(|| format!("creating {}", path.display()))?;
        let writer = SerializedFileWriter::new(out, root, Arc::new(props))?;
        let rows_per_group = (ROW_GROUP_BYTES / (8 * schema.len().max(1))).clamp(1024, 1 << 20);
        let columns = schema
            .iter()
            .map(|c| ColumnBuf {
                values: match c.kind {
                    Kind::Int => Values::Int(Vec::new()),
                    Kind::Float => Values::Float(Vec::new()),
                    Kind::Str => Values::Str(Vec::new()),
                },
                defs: Vec::new(),
                nullable: c.nullable,
            })
            .collect();
        Ok(ParquetSink {
            writer,
            columns,
            next: 0,
            rows: 0,
            rows_per_group,
        })
    }

    /// The column the next value goes to, with its definition level recorded.
    fn column(&mut self, present: bool) -> &mut ColumnBuf {
        let c = &mut self.columns[self.next];
        debug_assert!(present || c.nullable, "a null in a required column");
        if c.nullable {
            c.defs.push(i16::from(present));
        }
        self.next += 1;
        c
    }

    fn write_group(&mut self) -> Result<()> {
        let mut group = self.writer.next_row_group()?;
        for c in &mut self.columns {
            let mut w = group.next_column()?.context("one column writer per schema column")?;
            let defs = c.nullable.then_some(&c.defs[..]);
            match &mut c.values {
                Values::Int(v) => {
                    w.typed::<Int64Type>().write_batch(v, defs, None)?;
                    v.clear();
                }
                Values::Float(v) => {
                    w.typed::<DoubleType>().write_batch(v, defs, None)?;
                    v.clear();
                }
                Values::Str(v) => {
                    w.typed::<ByteArrayType>().write_batch(v, defs, None)?;
                    v.clear();
                }
            }
            c.defs.clear();
            w.close()?;
        }
        group.close()?;
        self.rows = 0;
        Ok(())
    }
}

impl RowSink for ParquetSink {
    fn int(&mut self, v: Option<i64>) {
        let c = self.column(v.is_some());
        match (&mut c.values, v) {
            (Values::Int(xs), Some(x)) => xs.push(x),
            (Values::Int(_), None) => {}
            _ => panic!("an integer pushed to a column of another type"),
        }
    }

    fn float(&mut self, v: Option<f64>) {
        let c = self.column(v.is_some());
        match (&mut c.values, v) {
            (Values::Float(xs), Some(x)) => xs.push(x),
            (Values::Float(_), None) => {}
            _ => panic!("a real pushed to a column of another type"),
        }
    }

    fn str(&mut self, v: &str) {
        let c = self.column(true);
        match &mut c.values {
            Values::Str(xs) => xs.push(ByteArray::from(v.as_bytes().to_vec())),
            _ => panic!("a string pushed to a column of another type"),
        }
    }

    fn end_row(&mut self) -> Result<()> {
        anyhow::ensure!(
            self.next == self.columns.len(),
            "a row of {} values for {} columns",
            self.next,
            self.columns.len()
        );
        self.next = 0;
        self.rows += 1;
        if self.rows == self.rows_per_group {
            self.write_group()?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<()> {
        anyhow::ensure!(self.next == 0, "a row left unfinished");
        if self.rows > 0 {
            self.write_group()?;
        }
        self.writer.into_inner()?.finish()?;
        Ok(())
    }
}

fn secs(x: SimTime) -> f64 {
    ns_to_secs(x.0)
}

fn diff(a: Option<SimTime>, b: Option<SimTime>) -> Option<f64> {
    Some(ns_to_secs((b? - a?).0))
}

/// `requests.csv`'s columns.
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

/// Pushes `requests.csv`'s rows.
pub fn requests_rows(res: &RunResult, s: &mut impl RowSink) -> Result<()> {
    for (i, r) in res.requests.iter().enumerate() {
        s.int(Some(i as i64));
        s.str(&res.session_keys[r.session.index()]);
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
        s.end_row()?;
    }
    Ok(())
}

/// Whether `timeseries` has its `group` and `profile` columns (fleets described with them).
fn labelled(res: &RunResult) -> bool {
    res.summary
        .backends
        .iter()
        .any(|b| !b.group.is_empty() || !b.profile.is_empty())
}

/// `timeseries.csv`'s columns.
pub fn series_schema(res: &RunResult) -> Vec<Column> {
    use Kind::*;
    let mut c = vec![
        Column::new("t_s", Float, false),
        Column::new("backend", Int, false),
        Column::new("running", Int, false),
        Column::new("waiting", Int, false),
        Column::new("kv_used_blocks", Int, false),
    ];
    if labelled(res) {
        c.push(Column::new("group", Str, false));
        c.push(Column::new("profile", Str, false));
    }
    c
}

/// Pushes `timeseries.csv`'s rows.
pub fn series_rows(res: &RunResult, s: &mut impl RowSink) -> Result<()> {
    let labelled = labelled(res);
    for r in &res.series {
        s.float(Some(secs(r.t)));
        s.int(Some(r.backend.index() as i64));
        for x in [r.running, r.waiting, r.kv_used_blocks] {
            s.int(Some(i64::from(x)));
        }
        if labelled {
            let b = res.summary.backends.get(r.backend.index());
            s.str(b.map_or("", |b| &b.group));
            s.str(b.map_or("", |b| &b.profile));
        }
        s.end_row()?;
    }
    Ok(())
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

fn push_view(s: &mut impl RowSink, v: &crate::router::ViewEntry, truth: u32, t: SimTime) {
    s.int(Some(i64::from(v.listed)));
    s.int(v.engine.map(|e| i64::from(e.running)));
    s.int(v.engine.map(|e| i64::from(e.waiting)));
    s.float(v.engine.map(|e| ns_to_secs((t - e.read_at).0)));
    s.int(v.requests.map(|r| i64::from(r.window_dispatches)));
    s.int(Some(i64::from(truth)));
}

/// `decisions.csv`'s columns (wide: one group of view columns per backend).
pub fn decisions_schema(res: &RunResult) -> Vec<Column> {
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
    for i in 0..res.decisions.n_backends {
        for (name, kind, nullable) in VIEW_COLUMNS {
            c.push(Column::new(format!("b{i}_{name}"), kind, nullable));
        }
    }
    c
}

/// Pushes `decisions.csv`'s rows.
pub fn decisions_rows(res: &RunResult, s: &mut impl RowSink) -> Result<()> {
    let log = &res.decisions;
    for (k, d) in log.rows.iter().enumerate() {
        let (view, truth) = log.detail(k);
        s.float(Some(secs(d.t)));
        s.int(Some(d.request.index() as i64));
        s.str(&res.session_keys[d.session.index()]);
        s.int(Some(i64::from(d.turn)));
        s.str(d.branch.as_str());
        s.int(Some(d.backend.index() as i64));
        s.int(Some(i64::try_from(d.match_chars).unwrap_or(i64::MAX)));
        for (v, tr) in view.iter().zip(truth) {
            push_view(s, &v, *tr, d.t);
        }
        s.end_row()?;
    }
    Ok(())
}

/// `decisions_long.csv`'s columns: one row per (decision, backend).
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

/// Pushes `decisions_long.csv`'s rows.
pub fn decisions_long_rows(res: &RunResult, s: &mut impl RowSink) -> Result<()> {
    let log = &res.decisions;
    for (k, d) in log.rows.iter().enumerate() {
        let (view, truth) = log.detail(k);
        for (b, (v, tr)) in view.iter().zip(truth).enumerate() {
            s.float(Some(secs(d.t)));
            s.int(Some(d.request.index() as i64));
            s.str(d.branch.as_str());
            s.int(Some(b as i64));
            s.int(Some(i64::from(d.backend.index() == b)));
            push_view(s, &v, *tr, d.t);
            s.end_row()?;
        }
    }
    Ok(())
}

/// The run's tables as Parquet files in `dir` (the four files in parallel); returns
/// their paths.
pub fn write_parquet(dir: &Path, res: &RunResult, decisions: bool) -> Result<Vec<std::path::PathBuf>> {
    type Rows = fn(&RunResult, &mut ParquetSink) -> Result<()>;
    let tables: [(&str, Vec<Column>, Rows); 4] = [
        ("requests.parquet", requests_schema(), requests_rows),
        ("timeseries.parquet", series_schema(res), series_rows),
        ("decisions.parquet", decisions_schema(res), decisions_rows),
        ("decisions_long.parquet", decisions_long_schema(), decisions_long_rows),
    ];
    use rayon::prelude::*;
    tables
        .into_par_iter()
        .filter(|(name, _, _)| decisions || !name.starts_with("decisions"))
        .map(|(name, schema, rows)| {
            let p = dir.join(name);
            let mut s = ParquetSink::create(&p, &schema)?;
            rows(res, &mut s)
                .and_then(|()| s.finish())
                .with_context(|| format!("writing {}", p.display()))?;
            Ok(p)
        })
        .collect()
}
