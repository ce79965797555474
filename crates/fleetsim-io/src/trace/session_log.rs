//! The `sessions` format: any per-call CSV or JSONL log, read through a column mapping, so a
//! user's own agent log loads without code:
//!
//! ```toml
//! columns = { session = "conv", turn = "step", start_unix_s = "ts", latency_s = "dur",
//!             input_tokens = "prompt", output_tokens = "completion" }
//! ```
//!
//! Start: one of `start_unix_s`, `start_s` (seconds in any origin), `start_ms`, or
//! `offset_s` (seconds since the session's start; sessions are then placed by
//! `session_arrival`). End: at most one of `end_unix_s` / `end_s` (seconds, the start's
//! clock) or `latency_s` (seconds after the start). Optional: `think_s` (client time before
//! the call), `ttft_s`, `block_hashes` (whole numbers, space-separated in CSV or a JSON
//! array), `model`, and the recorded length of a part every call repeats (a harness's tool
//! definitions or system prompt): `shared_prefix_tokens` or `shared_prefix_chars`, replayed
//! as a prefix shared across sessions. Without any start column, calls need `think_s` or
//! `turn` to be ordered.
//!
//! The CSV is strict: a row with more or fewer fields than the header is an error (never a
//! shifted read), a mapped column missing from the header or present twice is an error,
//! and a line longer than [`super::jsonl::MAX_LINE_BYTES`] stops the read.

use std::io::Read;

use serde::Deserialize;

use super::filter::RowFilter;
use super::jsonl::{MAX_LINE_BYTES, for_each_line, parse_json};
use super::lines::Capped;
use super::model::{Builder, NO_SESSION, RawRow, TraceError};
use super::model::{Calls, NO_SHARED, NONE, Timing, push_call, s_ns, stream_err};

/// Which column holds what (`columns = { ... }`; the key names are fixed).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnMap {
    /// Session id.
    pub session: Option<String>,
    /// Turn (call) number within the session.
    pub turn: Option<String>,
    /// Start, unix seconds.
    pub start_unix_s: Option<String>,
    /// Start, seconds (any origin).
    pub start_s: Option<String>,
    /// Start, milliseconds (any origin).
    pub start_ms: Option<String>,
    /// Start, seconds since the session's start.
    pub offset_s: Option<String>,
    /// End, unix seconds.
    pub end_unix_s: Option<String>,
    /// End, seconds (the start's origin).
    pub end_s: Option<String>,
    /// End, seconds after the start.
    pub latency_s: Option<String>,
    /// Client think time before the call, seconds.
    pub think_s: Option<String>,
    /// Recorded time to first token, seconds.
    pub ttft_s: Option<String>,
    /// Prompt tokens.
    pub input_tokens: String,
    /// Output tokens.
    pub output_tokens: String,
    /// Prefix block hashes.
    pub block_hashes: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// Tokens of a part every call repeats (a harness's system prompt and tool
    /// definitions), as the harness recorded them: replayed as a prefix shared across
    /// sessions.
    pub shared_prefix_tokens: Option<String>,
    /// The same part's length in characters (agent harnesses record
    /// `tool_definitions_chars`), converted at the trace table's `chars_per_token`.
    pub shared_prefix_chars: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum StartKind {
    UnixS,
    S,
    Ms,
    Offset,
    Missing,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum EndKind {
    Absolute,
    Latency,
    Missing,
}

impl ColumnMap {
    /// Parses and validates a `columns` table; errors are `(key, message)`.
    pub fn from_toml(v: &toml::Value) -> Result<ColumnMap, (String, String)> {
        let m: ColumnMap = v.clone().try_into().map_err(|e: toml::de::Error| {
            let msg = e.message().to_string();
            let key = ["unknown field `", "missing field `"]
                .iter()
                .find_map(|p| msg.strip_prefix(p))
                .and_then(|r| r.split('`').next())
                .map(str::to_string);
            (key.unwrap_or_default(), msg.lines().next().unwrap_or("").to_string())
        })?;
        m.validate()?;
        Ok(m)
    }

    /// Mapped (key, column) pairs.
    fn pairs(&self) -> Vec<(&'static str, &str)> {
        let opt = [
            ("session", &self.session),
            ("turn", &self.turn),
            ("start_unix_s", &self.start_unix_s),
            ("start_s", &self.start_s),
            ("start_ms", &self.start_ms),
            ("offset_s", &self.offset_s),
            ("end_unix_s", &self.end_unix_s),
            ("end_s", &self.end_s),
            ("latency_s", &self.latency_s),
            ("think_s", &self.think_s),
            ("ttft_s", &self.ttft_s),
            ("block_hashes", &self.block_hashes),
            ("model", &self.model),
            ("shared_prefix_tokens", &self.shared_prefix_tokens),
            ("shared_prefix_chars", &self.shared_prefix_chars),
        ];
        let mut v = vec![
            ("input_tokens", self.input_tokens.as_str()),
            ("output_tokens", self.output_tokens.as_str()),
        ];
        v.extend(opt.iter().filter_map(|(k, c)| c.as_deref().map(|c| (*k, c))));
        v
    }

    /// Checks the mapping; errors are `(key, message)`.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let pairs = self.pairs();
        for (i, (k, c)) in pairs.iter().enumerate() {
            if c.is_empty() {
                return Err((k.to_string(), "names no column".into()));
            }
            if let Some((k2, _)) = pairs[..i].iter().find(|(_, c2)| c2 == c) {
                return Err((k.to_string(), format!("names the column `{c}`, as `{k2}` does already")));
            }
        }
        let starts: Vec<&str> = pairs
            .iter()
            .map(|(k, _)| *k)
            .filter(|k| ["start_unix_s", "start_s", "start_ms", "offset_s"].contains(k))
            .collect();
        if starts.len() > 1 {
            return Err((
                starts[1].into(),
                format!("set one start column, not {}", starts.join(" and ")),
            ));
        }
        let ends: Vec<&str> = pairs
            .iter()
            .map(|(k, _)| *k)
            .filter(|k| ["end_unix_s", "end_s", "latency_s"].contains(k))
            .collect();
        if ends.len() > 1 {
            return Err((
                ends[1].into(),
                format!("set one end column, not {}", ends.join(" and ")),
            ));
        }
        if self.shared_prefix_tokens.is_some() && self.shared_prefix_chars.is_some() {
            return Err((
                "shared_prefix_chars".into(),
                "set one shared-part column, not shared_prefix_tokens and shared_prefix_chars".into(),
            ));
        }
        if self.offset_s.is_some() && self.session.is_none() {
            return Err((
                "offset_s".into(),
                "an offset within a session needs the `session` column".into(),
            ));
        }
        if self.start_kind() == StartKind::Missing {
            if let Some(e) = ends.first() {
                return Err((e.to_string(), "an end needs a start column".into()));
            }
            if self.think_s.is_none() && self.turn.is_none() {
                return Err((
                    "start_s".into(),
                    "map a start column (start_unix_s, start_s, start_ms or offset_s), or think_s or turn to order calls".into(),
                ));
            }
        }
        Ok(())
    }

    fn start_kind(&self) -> StartKind {
        if self.start_unix_s.is_some() {
            StartKind::UnixS
        } else if self.start_s.is_some() {
            StartKind::S
        } else if self.start_ms.is_some() {
            StartKind::Ms
        } else if self.offset_s.is_some() {
            StartKind::Offset
        } else {
            StartKind::Missing
        }
    }

    fn end_kind(&self) -> EndKind {
        if self.end_unix_s.is_some() || self.end_s.is_some() {
            EndKind::Absolute
        } else if self.latency_s.is_some() {
            EndKind::Latency
        } else {
            EndKind::Missing
        }
    }

    fn start_col(&self) -> Option<(&'static str, &str)> {
        let c = [
            ("start_unix_s", &self.start_unix_s),
            ("start_s", &self.start_s),
            ("start_ms", &self.start_ms),
            ("offset_s", &self.offset_s),
        ];
        c.into_iter().find_map(|(k, v)| v.as_deref().map(|v| (k, v)))
    }

    fn end_col(&self) -> Option<&str> {
        self.end_unix_s
            .as_deref()
            .or(self.end_s.as_deref())
            .or(self.latency_s.as_deref())
    }
}

/// One field of a record, as text or a JSON value.
enum Field<'a> {
    Text(&'a str),
    Json(&'a serde_json::Value),
}

impl Field<'_> {
    fn is_empty(&self) -> bool {
        match self {
            Field::Text(s) => s.trim().is_empty(),
            Field::Json(v) => v.is_null() || v.as_str().is_some_and(|s| s.trim().is_empty()),
        }
    }

    fn number(&self) -> Option<f64> {
        match self {
            Field::Text(s) => s.trim().parse().ok(),
            Field::Json(v) => v.as_f64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok())),
        }
        .filter(|x: &f64| x.is_finite())
    }

    fn whole(&self) -> Option<u64> {
        match self {
            Field::Text(s) => s.trim().parse().ok(),
            Field::Json(v) => v.as_u64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok())),
        }
        .or_else(|| {
            self.number()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
                .map(|f| f as u64)
        })
    }

    fn text(&self) -> String {
        match self {
            Field::Text(s) => s.trim().to_string(),
            Field::Json(serde_json::Value::String(s)) => s.clone(),
            Field::Json(v) => v.to_string(),
        }
    }

    /// A name (session id, model): text, or a JSON string or number; `None` for a JSON
    /// array, object or boolean, which no log writes as a name.
    fn name(&self) -> Option<String> {
        match self {
            Field::Json(serde_json::Value::Number(n)) => Some(n.to_string()),
            Field::Json(serde_json::Value::String(_)) | Field::Text(_) => Some(self.text()),
            Field::Json(_) => None,
        }
    }
}

/// One record's fields by mapping key.
struct Rec<'a> {
    get: &'a dyn Fn(&str) -> Option<Field<'a>>,
}

/// Reads a mapped per-call log (CSV, or JSONL when the first non-blank byte is `{`).
pub(super) fn read(r: impl Read, b: &mut Builder, cols: &ColumnMap, filter: &[RowFilter]) -> Result<(), TraceError> {
    let mut r = std::io::BufReader::with_capacity(1 << 16, r);
    let head = std::io::BufRead::fill_buf(&mut r).map_err(|e| stream_err(&b.trace.file, 1, false, &e))?;
    let json = head
        .iter()
        .copied()
        .find(|c| !(c.is_ascii_whitespace() || [0xef, 0xbb, 0xbf].contains(c)))
        == Some(b'{');
    let mut calls = Calls {
        offsets: cols.start_kind() == StartKind::Offset,
        shared_in_chars: cols.shared_prefix_chars.is_some(),
        ..Calls::default()
    };
    let mut hashes = Vec::new();
    if json {
        let mut seen = vec![false; filter.len()];
        for_each_line(r, b, |text, line, b| {
            let obj: serde_json::Map<String, serde_json::Value> = parse_json(b, line, text)?;
            let mut keep = true;
            for (i, f) in filter.iter().enumerate() {
                let v = obj.get(&f.column);
                seen[i] |= v.is_some();
                keep &= f.matches_json(v);
            }
            if !keep {
                b.trace.filtered_rows += 1;
                return Ok(());
            }
            let get = |k: &str| -> Option<Field<'_>> {
                let name = column_of(cols, k)?;
                obj.get(name).map(Field::Json)
            };
            row(b, &mut calls, cols, line, &Rec { get: &get }, &mut hashes)
        })?;
        if let Some(f) = filter.iter().zip(&seen).find(|(_, s)| !**s).map(|(f, _)| f) {
            return Err(TraceError {
                file: b.trace.file.clone(),
                line: None,
                column: Some(f.column.clone()),
                message: format!("where.{} names a key that no row has", f.column),
            });
        }
    } else {
        read_csv(r, b, cols, filter, &mut calls, &mut hashes)?;
    }
    b.trace.calls = Some(Box::new(calls));
    Ok(())
}

fn column_of<'c>(cols: &'c ColumnMap, key: &str) -> Option<&'c str> {
    match key {
        "input_tokens" => Some(cols.input_tokens.as_str()),
        "output_tokens" => Some(cols.output_tokens.as_str()),
        "session" => cols.session.as_deref(),
        "turn" => cols.turn.as_deref(),
        "start_unix_s" => cols.start_unix_s.as_deref(),
        "start_s" => cols.start_s.as_deref(),
        "start_ms" => cols.start_ms.as_deref(),
        "offset_s" => cols.offset_s.as_deref(),
        "end_unix_s" => cols.end_unix_s.as_deref(),
        "end_s" => cols.end_s.as_deref(),
        "latency_s" => cols.latency_s.as_deref(),
        "think_s" => cols.think_s.as_deref(),
        "ttft_s" => cols.ttft_s.as_deref(),
        "block_hashes" => cols.block_hashes.as_deref(),
        "model" => cols.model.as_deref(),
        "shared_prefix_tokens" => cols.shared_prefix_tokens.as_deref(),
        "shared_prefix_chars" => cols.shared_prefix_chars.as_deref(),
        _ => None,
    }
}

fn read_csv(
    r: impl Read,
    b: &mut Builder,
    cols: &ColumnMap,
    filter: &[RowFilter],
    calls: &mut Calls,
    hashes: &mut Vec<u64>,
) -> Result<(), TraceError> {
    let file = b.trace.file.clone();
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        // The csv crate has no line limit: the shared cap makes an endless line an error.
        .from_reader(Capped::with_cap(r, MAX_LINE_BYTES));
    let header: Vec<String> = rdr
        .headers()
        .map_err(|e| b.err(1, None, format!("cannot read the CSV header: {e}")))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    let index = mapped_columns(&header, cols, &file)?;
    let where_at = filter_columns(&header, filter, &file)?;
    let mut rec = csv::StringRecord::new();
    loop {
        match rdr.read_record(&mut rec) {
            Ok(false) => break,
            Ok(true) => {
                let line = rec.position().map_or(0, csv::Position::line);
                if rec.iter().all(|f| f.trim().is_empty()) {
                    continue;
                }
                if !filter.iter().zip(&where_at).all(|(f, &i)| f.matches_text(rec.get(i))) {
                    b.trace.filtered_rows += 1;
                    continue;
                }
                let get = |k: &str| -> Option<Field<'_>> {
                    let i = index.iter().find(|(x, _)| *x == k)?.1;
                    rec.get(i).map(Field::Text)
                };
                if let Err(e) = row(b, calls, cols, line, &Rec { get: &get }, hashes) {
                    b.bad(e)?;
                }
            }
            Err(e) => {
                let line = e.position().map_or(0, csv::Position::line);
                let msg = format!("malformed CSV: {e}");
                if let csv::ErrorKind::Io(io) = e.into_kind() {
                    return Err(super::lines::read_error(&file, line.max(1), io));
                }
                let err = b.err(line, None, msg);
                b.bad(err)?;
            }
        }
    }
    Ok(())
}

/// Where each mapped column stands in the CSV header: every one must be there, once.
fn mapped_columns(header: &[String], cols: &ColumnMap, file: &str) -> Result<Vec<(&'static str, usize)>, TraceError> {
    let mut index = Vec::new();
    for (k, c) in cols.pairs() {
        let at: Vec<usize> = (0..header.len()).filter(|&i| header[i] == c).collect();
        let message = match at.len() {
            1 => {
                index.push((k, at[0]));
                continue;
            }
            0 => format!(
                "columns.{k} names `{c}`, which the header lacks (has: {})",
                header.join(", ")
            ),
            _ => format!("the header has the column `{c}` {} times (columns.{k})", at.len()),
        };
        return Err(TraceError {
            file: file.to_string(),
            line: Some(1),
            column: Some(c.to_string()),
            message,
        });
    }
    Ok(index)
}

/// Where each column of the `where` filter stands in the CSV header.
fn filter_columns(header: &[String], filter: &[RowFilter], file: &str) -> Result<Vec<usize>, TraceError> {
    filter
        .iter()
        .map(|f| {
            header.iter().position(|h| *h == f.column).ok_or_else(|| TraceError {
                file: file.to_string(),
                line: Some(1),
                column: Some(f.column.clone()),
                message: format!(
                    "where.{} names `{}`, which the header lacks (has: {})",
                    f.column,
                    f.column,
                    header.join(", ")
                ),
            })
        })
        .collect()
}

/// One row read through the column mapping: each value by its mapping key, its errors at
/// the row's line and the column it is read from.
struct Cells<'c, 'r> {
    cols: &'c ColumnMap,
    line: u64,
    rec: &'c Rec<'r>,
}

impl<'r> Cells<'_, 'r> {
    /// The column a key is read from (for messages).
    fn column(&self, k: &str) -> String {
        column_of(self.cols, k).unwrap_or(k).to_string()
    }

    fn err(&self, b: &Builder, k: &str, message: impl Into<String>) -> TraceError {
        b.err(self.line, Some(&self.column(k)), message)
    }

    /// A value that may be empty or absent.
    fn opt(&self, k: &str) -> Option<Field<'r>> {
        (self.rec.get)(k).filter(|f| !f.is_empty())
    }

    /// A value that must be there.
    fn need(&self, b: &Builder, k: &str) -> Result<Field<'r>, TraceError> {
        self.opt(k)
            .ok_or_else(|| self.err(b, k, format!("missing (columns.{k})")))
    }

    /// A token count.
    fn count(&self, b: &Builder, k: &str) -> Result<u64, TraceError> {
        let f = self.need(b, k)?;
        f.whole().ok_or_else(|| {
            self.err(
                b,
                k,
                format!("expected a whole number >= 0, got {}", crate::quote::quote(&f.text())),
            )
        })
    }

    /// A time, in the key's unit times `scale` seconds, as ns.
    fn secs(&self, b: &Builder, k: &str, f: &Field<'_>, scale: f64) -> Result<u64, TraceError> {
        f.number().and_then(|x| s_ns(x * scale)).ok_or_else(|| {
            self.err(
                b,
                k,
                format!(
                    "expected a time in [0, 1.8e10] s, got {}",
                    crate::quote::quote(&f.text())
                ),
            )
        })
    }

    /// An optional duration in seconds, as ns or [`NONE`].
    fn opt_secs(&self, b: &Builder, k: &str) -> Result<u64, TraceError> {
        match self.opt(k) {
            Some(f) => self.secs(b, k, &f, 1.0),
            None => Ok(NONE),
        }
    }

    /// The call's start, ns (0 without a start column: calls are ordered by think time or
    /// turn).
    fn start(&self, b: &Builder) -> Result<u64, TraceError> {
        match self.cols.start_col() {
            Some((k, _)) => {
                let scale = if k == "start_ms" { 1e-3 } else { 1.0 };
                self.secs(b, k, &self.need(b, k)?, scale)
            }
            None => Ok(0),
        }
    }

    /// The call's end, ns or [`NONE`]: an end time, or the start plus the latency; never
    /// before the start.
    fn end(&self, b: &Builder, start: u64) -> Result<u64, TraceError> {
        let kind = self.cols.end_kind();
        if kind == EndKind::Missing || self.cols.end_col().is_none() {
            return Ok(NONE);
        }
        let k = ["end_unix_s", "end_s", "latency_s"]
            .into_iter()
            .find(|k| column_of(self.cols, k).is_some())
            .expect("an end column");
        let Some(f) = self.opt(k) else {
            return Ok(NONE);
        };
        let v = self.secs(b, k, &f, 1.0)?;
        let e = if kind == EndKind::Latency {
            // Checked: an end past 2^64 ns is an error, never a clamped value.
            start
                .checked_add(v)
                .filter(|&e| e != NONE)
                .ok_or_else(|| self.err(b, k, "the start plus the latency ends after the year 2554 (2^64 ns)"))?
        } else {
            v
        };
        if e < start {
            return Err(self.err(b, k, "the call ends before it starts"));
        }
        Ok(e)
    }

    /// A name (session, model), if given.
    fn name(&self, b: &Builder, k: &str) -> Result<Option<String>, TraceError> {
        let Some(f) = self.opt(k) else {
            return Ok(None);
        };
        f.name().map(Some).ok_or_else(|| {
            self.err(
                b,
                k,
                format!("expected a string or a number, got {}", crate::quote::escape(&f.text())),
            )
        })
    }

    /// The turn number as written, or `u32::MAX`.
    fn turn(&self, b: &Builder) -> Result<u32, TraceError> {
        let Some(f) = self.opt("turn") else {
            return Ok(u32::MAX);
        };
        let v = f.whole().filter(|&v| v < u64::from(u32::MAX)).ok_or_else(|| {
            self.err(
                b,
                "turn",
                format!(
                    "expected a whole number below 2^32 - 1, got {}",
                    crate::quote::quote(&f.text())
                ),
            )
        })?;
        Ok(v as u32)
    }

    /// The recorded length of the part every call repeats (`shared_prefix_tokens` or
    /// `shared_prefix_chars`), or [`NO_SHARED`] when the column is unmapped or empty.
    fn shared(&self, b: &Builder) -> Result<u32, TraceError> {
        let Some(k) = ["shared_prefix_tokens", "shared_prefix_chars"]
            .into_iter()
            .find(|k| column_of(self.cols, k).is_some())
        else {
            return Ok(NO_SHARED);
        };
        let Some(f) = self.opt(k) else {
            return Ok(NO_SHARED);
        };
        f.whole()
            .filter(|&v| v < u64::from(u32::MAX / 2))
            .map(|v| v as u32)
            .ok_or_else(|| {
                self.err(
                    b,
                    k,
                    format!(
                        "expected a whole number >= 0 below 2^31, got {}",
                        crate::quote::quote(&f.text())
                    ),
                )
            })
    }

    /// The prefix block hashes into `hashes`: a JSON array, or whole numbers separated by
    /// spaces, commas or semicolons.
    fn hashes(&self, b: &Builder, hashes: &mut Vec<u64>) -> Result<(), TraceError> {
        hashes.clear();
        let Some(f) = self.opt("block_hashes") else {
            return Ok(());
        };
        let bad = |t: &str| {
            self.err(
                b,
                "block_hashes",
                format!("expected whole numbers, got {}", crate::quote::quote(t)),
            )
        };
        match f {
            Field::Json(serde_json::Value::Array(a)) => {
                for v in a {
                    hashes.push(v.as_u64().ok_or_else(|| bad(&v.to_string()))?);
                }
            }
            other => {
                for tok in other.text().split([' ', ',', ';']).filter(|t| !t.is_empty()) {
                    hashes.push(tok.parse().map_err(|_| bad(tok))?);
                }
            }
        }
        Ok(())
    }
}

fn row(
    b: &mut Builder,
    calls: &mut Calls,
    cols: &ColumnMap,
    line: u64,
    rec: &Rec<'_>,
    hashes: &mut Vec<u64>,
) -> Result<(), TraceError> {
    let c = Cells { cols, line, rec };
    let input = c.count(b, "input_tokens")?;
    let output = c.count(b, "output_tokens")?;
    let start = c.start(b)?;
    let end = c.end(b, start)?;
    let think = c.opt_secs(b, "think_s")?;
    let ttft = c.opt_secs(b, "ttft_s")?;
    let session_name = c.name(b, "session")?;
    let model = c.name(b, "model")?;
    let session = match &session_name {
        Some(s) => b.session(s),
        None => NO_SESSION,
    };
    let turn = c.turn(b)?;
    let shared = c.shared(b)?;
    c.hashes(b, hashes)?;
    let timing = Timing {
        end_ns: end,
        ttft_ns: ttft,
        think_ns: think,
        model: model.as_deref(),
    };
    let r = RawRow {
        session,
        turn,
        blocks: hashes,
        ..RawRow::new(line, start, input, output)
    };
    let kept = calls.end_ns.len();
    push_call(b, calls, r, timing)?;
    if calls.end_ns.len() > kept && (cols.shared_prefix_tokens.is_some() || cols.shared_prefix_chars.is_some()) {
        calls.shared_len.push(shared);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::model::Format;
    use crate::trace::reader::{AgentReadOptions, read_any};

    fn cols(t: &str) -> ColumnMap {
        ColumnMap::from_toml(&toml::from_str::<toml::Table>(&format!("c = {{ {t} }}")).unwrap()["c"]).unwrap()
    }

    fn parse(text: &str, c: &ColumnMap, skip: bool) -> Result<crate::trace::Trace, TraceError> {
        let o = AgentReadOptions {
            columns: Some(c.clone()),
            ..AgentReadOptions::default()
        };
        read_any(text.as_bytes(), "s.csv", Format::Sessions, skip, &o)
    }

    #[test]
    fn csv_with_latency_and_hashes() {
        let c = cols(
            r#"session = "conv", start_unix_s = "ts", latency_s = "dur", input_tokens = "p", output_tokens = "o", block_hashes = "h", model = "m""#,
        );
        let t = parse(
            "\u{feff}conv,ts,dur,p,o,h,m\na,100.5,2,40,5,1 2,x\nb,101,,30,5,,y\n",
            &c,
            false,
        )
        .unwrap();
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[0].t_ns, 100_500_000_000);
        let k = t.calls.as_ref().unwrap();
        assert_eq!(k.end_ns, vec![102_500_000_000, NONE]);
        assert_eq!(t.rows[0].blocks(&t.blocks), &[0, 1]);
        assert_eq!(k.model_of(1), Some("y"));
    }

    #[test]
    fn jsonl_with_offsets_and_think() {
        let c = cols(
            r#"session = "s", offset_s = "off", think_s = "th", input_tokens = "in", output_tokens = "out", block_hashes = "h""#,
        );
        let t = parse(
            "{\"s\": \"a\", \"off\": 0, \"in\": 10, \"out\": 2, \"h\": [5, 6]}\n{\"s\": \"a\", \"off\": \"3.5\", \"th\": 1.25, \"in\": 20, \"out\": 2}\n",
            &c,
            false,
        )
        .unwrap();
        assert_eq!(t.rows[1].t_ns, 3_500_000_000);
        let k = t.calls.as_ref().unwrap();
        assert!(k.offsets);
        assert_eq!(k.think_ns, vec![NONE, 1_250_000_000]);
    }

    #[test]
    fn names_are_text_and_ends_are_checked() {
        // A JSON array is no session id (its JSON text was read as one), and a latency
        // that ends past 2^64 ns was clamped.
        let c = cols(
            r#"session = "s", start_s = "t", latency_s = "l", input_tokens = "i", output_tokens = "o", model = "m""#,
        );
        let e = parse("{\"s\": [1, 2], \"t\": 0, \"i\": 5, \"o\": 5}\n", &c, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "s.csv:1: column `s`: expected a string or a number, got [1,2]"
        );
        let e = parse("{\"s\": 7, \"t\": 0, \"i\": 5, \"o\": 5, \"m\": {}}\n", &c, false).unwrap_err();
        assert_eq!(e.column.as_deref(), Some("m"), "{e}");
        let t = parse("{\"s\": 7, \"t\": 0, \"i\": 5, \"o\": 5, \"m\": \"x\"}\n", &c, false).unwrap();
        assert_eq!(t.session_names, ["7"]);
        let e = parse("s,t,l,i,o,m\na,1.7e10,1.7e10,5,5,x\n", &c, false).unwrap_err();
        assert_eq!(e.column.as_deref(), Some("l"), "{e}");
        assert!(e.message.contains("2^64"), "{e}");
    }

    #[test]
    fn strict_csv_and_mapping_errors() {
        let c = cols(r#"session = "s", start_s = "t", input_tokens = "i", output_tokens = "o""#);
        // A short row and a long row: errors, never a shifted read.
        let e = parse("s,t,i,o\na,1,5,5\nb,2,5\n", &c, false).unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("malformed CSV"), "{e}");
        let e = parse("s,t,i,o\na,1,5,5,9\n", &c, false).unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        let t = parse("s,t,i,o\na,1,5,5\nb,2,5\nc,3,x,5\nd,4,5,5\n", &c, true).unwrap();
        assert_eq!((t.rows.len(), t.skipped), (2, 2));
        // Mapped columns must exist once.
        let e = parse("s,t,i\na,1,5\n", &c, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "s.csv:1: column `o`: columns.output_tokens names `o`, which the header lacks (has: s, t, i)"
        );
        let e = parse("s,t,i,o,i\na,1,5,5,5\n", &c, false).unwrap_err();
        assert!(e.message.contains("2 times"), "{e}");
        let e = parse("s,t,i,o\na,1,-5,5\n", &c, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "s.csv:2: column `i`: expected a whole number >= 0, got `-5`"
        );
        // Mapping validation.
        let bad = |t: &str| {
            ColumnMap::from_toml(&toml::from_str::<toml::Table>(&format!("c = {{ {t} }}")).unwrap()["c"]).unwrap_err()
        };
        assert_eq!(
            bad(r#"input_tokens = "a", output_tokens = "b", start_s = "t", start_ms = "u""#).0,
            "start_ms"
        );
        assert_eq!(
            bad(r#"input_tokens = "a", output_tokens = "a", start_s = "t""#).0,
            "output_tokens"
        );
        assert_eq!(
            bad(r#"input_tokens = "a", output_tokens = "b", offset_s = "t""#).0,
            "offset_s"
        );
        assert_eq!(
            bad(r#"input_tokens = "a", output_tokens = "b", start = "t""#).0,
            "start"
        );
        assert_eq!(bad(r#"input_tokens = "a", start_s = "t""#).0, "output_tokens");
    }
}
