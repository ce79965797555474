//! What a run table is written through: its columns ([`Column`], [`Kind`]) and the
//! row-by-row receiver both writers implement ([`RowSink`]: the CSV sink of the tables
//! module and the Parquet sink of the columnar one), kept apart from both so neither
//! writer depends on the other.

use anyhow::Result;

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
    /// A column named `name`.
    pub fn new(name: impl Into<String>, kind: Kind, nullable: bool) -> Column {
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
    fn finish(self) -> Result<()>
    where
        Self: Sized;
}
