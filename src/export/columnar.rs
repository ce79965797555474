//! Columnar result files (`sim run --format parquet`): `requests.parquet`,
//! `timeseries.parquet`, `decisions.parquet` and `decisions_long.parquet`, the same
//! columns, in the same order and with the same values as their CSV twins (times in
//! seconds as `DOUBLE`, counts and ids as `INT64`, names as UTF-8 strings; an empty CSV
//! field is a null), compressed with zstd.
//!
//! Each file is written through a [`RowSink`] (the columns and rows are
//! [`super::tables`], shared with the CSV files): the caller pushes a row's values in
//! column order and ends the row; the sink keeps one row group's columns in memory (at most
//! about [`ROW_GROUP_BYTES`]), encodes and writes them when the group is full, and writes
//! the footer on [`RowSink::finish`]. So a caller may push rows as a run produces them.
//!
//! Owns: the Parquet encoding of the run tables. Invariant: the
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

use super::sink::{Column, Kind, RowSink};
use crate::atomic::Hashed;

/// Most bytes of values a [`ParquetSink`] buffers before it writes a row group (8 bytes a
/// value): about 380,000 rows of `decisions_long`, 40,000 of a 16-backend `decisions`.
/// The four tables may be written at once, so a run holds up to four groups at a time.
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
            // A repeat of the value above (a branch name, a group) shares its bytes.
            Values::Str(xs) => match xs.last() {
                Some(last) if last.data() == v.as_bytes() => xs.push(last.clone()),
                _ => xs.push(ByteArray::from(v.as_bytes().to_vec())),
            },
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
