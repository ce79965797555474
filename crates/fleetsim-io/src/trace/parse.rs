//! Streaming readers for request traces: the native CSV, Mooncake JSONL, Azure LLM 2023 CSV
//! and BurstGPT CSV. Each reader turns rows into compact [`TraceRow`]s (no strings kept per
//! row: session ids are interned, block hash ids are remapped to dense `u32`s stored in one
//! arena). A malformed row is an error naming the file, the line and the column; with
//! `skip_bad_rows` it is counted and reported instead (nothing is dropped silently).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use rustc_hash::FxHashMap;
use serde::Deserialize;

use super::lines::{Capped, Lines, check_header, check_width, io_error};

/// A trace file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// fleetsim's own CSV (`arrival_s,session_id,turn,input_tokens,output_tokens,block_ids`).
    Native,
    /// Mooncake FAST'25 JSONL (`timestamp` ms, `input_length`, `output_length`, `hash_ids`).
    Mooncake,
    /// Azure LLM inference trace 2023 CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`).
    Azure,
    /// BurstGPT CSV (`Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`).
    BurstGpt,
    /// NVIDIA Dynamo agent request trace `dynamo.request.trace.v1` (JSONL, plain or gzip).
    Dynamo,
    /// OpenTelemetry GenAI spans, OTLP/JSON as the Collector's file exporter writes them.
    Otel,
    /// Any per-call CSV or JSONL, read through a `columns = { ... }` mapping.
    Sessions,
}

/// Every format, for messages.
pub const FORMAT_NAMES: &str = "`native`, `mooncake`, `azure`, `burstgpt`, `dynamo`, `otel` or `sessions`";

impl Format {
    /// Name as written in scenarios and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Native => "native",
            Format::Mooncake => "mooncake",
            Format::Azure => "azure",
            Format::BurstGpt => "burstgpt",
            Format::Dynamo => "dynamo",
            Format::Otel => "otel",
            Format::Sessions => "sessions",
        }
    }

    /// Parses a format name.
    pub fn parse(s: &str) -> Result<Format, String> {
        match s {
            "native" => Ok(Format::Native),
            "mooncake" => Ok(Format::Mooncake),
            "azure" => Ok(Format::Azure),
            "burstgpt" => Ok(Format::BurstGpt),
            "dynamo" => Ok(Format::Dynamo),
            "otel" => Ok(Format::Otel),
            "sessions" => Ok(Format::Sessions),
            other => Err(format!("unknown trace format `{other}`; expected {FORMAT_NAMES}")),
        }
    }

    /// Tokens per prefix block id when the format has them (Mooncake: 512; Dynamo: 16, its
    /// `replay.trace_block_size`).
    pub fn default_block_tokens(self) -> u32 {
        match self {
            Format::Dynamo => 16,
            _ => 512,
        }
    }
}

/// No session id.
pub const NO_SESSION: u32 = u32::MAX;

/// One request of a trace, compactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRow {
    /// Arrival in ns from the format's time origin (not yet relative to the first row).
    pub t_ns: u64,
    /// Prompt tokens (the whole prompt, including any shared prefix).
    pub input: u32,
    /// Output tokens.
    pub output: u32,
    /// Interned session id, or [`NO_SESSION`].
    pub session: u32,
    /// Turn number within the session as written, or `u32::MAX`.
    pub turn: u32,
    /// Offset of this row's block ids in [`Trace::blocks`].
    pub blocks_off: u32,
    /// Number of block ids.
    pub blocks_len: u32,
    /// 1-based line of the row in its file.
    pub line: u32,
}

impl TraceRow {
    /// This row's dense block ids.
    pub fn blocks<'a>(&self, arena: &'a [u32]) -> &'a [u32] {
        &arena[self.blocks_off as usize..(self.blocks_off + self.blocks_len) as usize]
    }
}

/// A parsed trace.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The file, as named to the reader.
    pub file: String,
    /// Detected or given format.
    pub format: Option<Format>,
    /// Rows in file order.
    pub rows: Vec<TraceRow>,
    /// Dense block ids of every row, concatenated.
    pub blocks: Vec<u32>,
    /// Raw block id of each dense id (for conversion back to a file).
    pub raw_blocks: Vec<u64>,
    /// Session names by interned id.
    pub session_names: Vec<String>,
    /// Rows skipped as malformed (`skip_bad_rows`).
    pub skipped: u64,
    /// The first few skip messages.
    pub skip_messages: Vec<String>,
    /// Rows whose output of 0 tokens was replayed as 1 (a request must produce a token).
    pub zero_output_rows: u64,
    /// Recorded per-call timing of session-shaped formats (`dynamo`, `otel`, `sessions`).
    pub calls: Option<Box<super::calls::Calls>>,
}

impl Trace {
    /// Whether any row carries prefix block ids.
    pub fn has_blocks(&self) -> bool {
        !self.blocks.is_empty()
    }

    /// Whether any row carries a session id.
    pub fn has_sessions(&self) -> bool {
        !self.session_names.is_empty()
    }

    /// Notes about rows not replayed as written.
    pub fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.skipped > 0 {
            let mut s = format!("{}: skipped {} malformed rows", self.file, self.skipped);
            if let Some(m) = self.skip_messages.first() {
                s.push_str(&format!(" (first: {m})"));
            }
            out.push(s);
        }
        if self.zero_output_rows > 0 {
            out.push(format!(
                "{}: {} rows with 0 output tokens are replayed with 1",
                self.file, self.zero_output_rows
            ));
        }
        out
    }
}

/// A malformed row or unreadable file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {}", crate::quote::escape(file), match (line, column) {
    (Some(l), Some(c)) => format!(":{l}: column {}", crate::quote::quote(c)),
    (Some(l), None) => format!(":{l}"),
    (None, Some(c)) => format!(": column {}", crate::quote::quote(c)),
    _ => String::new(),
}, crate::quote::escape(message))]
pub struct TraceError {
    /// File.
    pub file: String,
    /// 1-based line.
    pub line: Option<u64>,
    /// Column (field) name.
    pub column: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// Reader options.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadOptions {
    /// Format; detected from the first line when `None`.
    pub format: Option<Format>,
    /// Count and report malformed rows instead of failing.
    pub skip_bad_rows: bool,
}

/// Most skip messages kept.
const KEEP_MESSAGES: usize = 5;

pub(super) struct Builder {
    pub(super) trace: Trace,
    /// Dense id by raw id for small raw ids (Mooncake's are `0..n`): a plain table lookup.
    direct: Vec<u32>,
    /// Dense id by raw id for the others.
    dense: FxHashMap<u64, u32>,
    sessions: FxHashMap<String, u32>,
    skip: bool,
    /// Memory the parsed trace may take (the default of `limits.max_memory_gib`): an
    /// endless stream of valid rows is refused instead of growing until an abort.
    budget_bytes: u64,
    /// Bytes held outside the arenas: interned session names (twice: list and map) and
    /// what the agent readers keep per call and per tool event ([`Builder::charge`]).
    extra_bytes: u64,
}

/// Bytes per dense-map entry (a `(u64, u32)` slot padded to 16 bytes, its control byte, and
/// the 1/8 of slack hashbrown keeps free), generously.
const MAP_ENTRY_BYTES: u64 = 20;

/// The capacity a `Vec` of capacity `cap` has once it holds `need` elements.
fn grown(cap: usize, need: usize) -> u64 {
    if need <= cap {
        cap as u64
    } else {
        need.max(cap.saturating_mul(2)) as u64
    }
}

impl Builder {
    pub(super) fn new(file: &str, format: Format, skip: bool) -> Self {
        Builder {
            trace: Trace {
                file: file.to_string(),
                format: Some(format),
                ..Trace::default()
            },
            direct: Vec::new(),
            dense: FxHashMap::default(),
            sessions: FxHashMap::default(),
            skip,
            budget_bytes: crate::preflight::Budget::new(None).map_or(u64::MAX, |b| b.bytes),
            extra_bytes: 0,
        }
    }

    pub(super) fn err(&self, line: u64, column: Option<&str>, message: impl Into<String>) -> TraceError {
        TraceError {
            file: self.trace.file.clone(),
            line: Some(line),
            column: column.map(str::to_string),
            message: message.into(),
        }
    }

    /// Fails, or counts the row as skipped.
    pub(super) fn bad(&mut self, e: TraceError) -> Result<(), TraceError> {
        if !self.skip {
            return Err(e);
        }
        self.trace.skipped += 1;
        if self.trace.skip_messages.len() < KEEP_MESSAGES {
            self.trace.skip_messages.push(e.to_string());
        }
        Ok(())
    }

    pub(super) fn session(&mut self, name: &str) -> u32 {
        if name.is_empty() {
            return NO_SESSION;
        }
        if let Some(&id) = self.sessions.get(name) {
            return id;
        }
        let id = self.trace.session_names.len() as u32;
        self.extra_bytes = self.extra_bytes.saturating_add(2 * (name.len() as u64 + 32));
        self.trace.session_names.push(name.to_string());
        self.sessions.insert(name.to_string(), id);
        id
    }

    fn block(&mut self, raw: u64) -> u32 {
        let next = self.trace.raw_blocks.len() as u32;
        // The direct table grows only while it stays proportional to the ids seen.
        let limit = (1u64 << 20).max(16 * (u64::from(next) + 1));
        if raw < limit && self.dense.is_empty() {
            let i = raw as usize;
            if i >= self.direct.len() {
                self.direct.resize((i + 1).next_power_of_two(), u32::MAX);
            }
            if self.direct[i] == u32::MAX {
                self.direct[i] = next;
                self.trace.raw_blocks.push(raw);
            }
            return self.direct[i];
        }
        if self.dense.is_empty() {
            // Leave the table for the map, once and for all.
            for (i, &d) in self.direct.iter().enumerate() {
                if d != u32::MAX {
                    self.dense.insert(i as u64, d);
                }
            }
            self.direct = Vec::new();
        }
        let id = *self.dense.entry(raw).or_insert(next);
        if id == next {
            self.trace.raw_blocks.push(raw);
        }
        id
    }

    /// Bytes the parsed trace takes once a row with `new_blocks` block ids is added: every
    /// arena at the capacity it grows to (a `Vec` doubles), the dense map as if every id
    /// were new, and [`Builder::extra_bytes`].
    fn bytes_with(&self, new_blocks: usize) -> u64 {
        let t = &self.trace;
        let rows = grown(t.rows.capacity(), t.rows.len() + 1) * std::mem::size_of::<TraceRow>() as u64;
        let arena = grown(t.blocks.capacity(), t.blocks.len() + new_blocks) * 4;
        let raw = grown(t.raw_blocks.capacity(), t.raw_blocks.len() + new_blocks) * 8;
        let map = if self.dense.is_empty() && new_blocks == 0 {
            0
        } else {
            grown(self.dense.capacity(), self.dense.len() + new_blocks) * MAP_ENTRY_BYTES
        };
        let direct = self.direct.capacity() as u64 * 4;
        rows.saturating_add(arena)
            .saturating_add(raw)
            .saturating_add(map)
            .saturating_add(direct)
            .saturating_add(self.extra_bytes)
    }

    /// The error of a trace beyond the memory budget, at `line`.
    fn over_budget(&self, line: u64, bytes: u64) -> TraceError {
        self.err(
            line,
            None,
            format!(
                "the trace would take {} of memory with this row ({} rows and {} block ids read so far), above the default limits.max_memory_gib ({}: half this machine's memory); cut the file",
                crate::preflight::human(bytes),
                self.trace.rows.len(),
                self.trace.blocks.len(),
                crate::preflight::human(self.budget_bytes),
            ),
        )
    }

    /// Counts `bytes` more held by a reader (per call or per tool event), refusing beyond
    /// the budget before the reader allocates them.
    pub(super) fn charge(&mut self, line: u64, bytes: u64) -> Result<(), TraceError> {
        self.extra_bytes = self.extra_bytes.saturating_add(bytes);
        let need = self.bytes_with(0);
        if need > self.budget_bytes {
            return Err(self.over_budget(line, need));
        }
        Ok(())
    }

    /// Adds one request. Checked before anything is allocated: its tokens, its block ids
    /// (at most one per prompt token; a reader that knows its block size checks the exact
    /// bound first) and the memory the trace takes with it (every row, against the
    /// budget, with the capacities the arenas grow to).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push(
        &mut self,
        line: u64,
        t_ns: u64,
        input: u64,
        output: u64,
        session: u32,
        turn: u32,
        blocks: &[u64],
    ) -> Result<(), TraceError> {
        let (in_col, out_col, blocks_col) = match self.trace.format {
            Some(Format::Mooncake) => ("input_length", "output_length", "hash_ids"),
            Some(Format::Azure) => ("ContextTokens", "GeneratedTokens", "block_ids"),
            Some(Format::BurstGpt) => ("Request tokens", "Response tokens", "block_ids"),
            Some(Format::Dynamo) => (
                "event.request.input_tokens",
                "event.request.output_tokens",
                "event.request.replay.input_sequence_hashes",
            ),
            Some(Format::Sessions) => ("input_tokens", "output_tokens", "block_hashes"),
            _ => ("input_tokens", "output_tokens", "block_ids"),
        };
        if input == 0 {
            return self.bad(self.err(line, Some(in_col), "a request needs at least 1 prompt token, got 0"));
        }
        if input > u64::from(u32::MAX) || output > u64::from(u32::MAX) || input + output > u64::from(u32::MAX) {
            let col = if input > u64::from(u32::MAX) { in_col } else { out_col };
            return self.bad(self.err(
                line,
                Some(col),
                format!("{input} + {output} tokens is above the 2^32 - 1 a request may hold"),
            ));
        }
        if blocks.len() as u64 > input {
            return self.bad(self.err(
                line,
                Some(blocks_col),
                format!(
                    "{} block ids for a prompt of {input} tokens: a block holds at least one token",
                    blocks.len()
                ),
            ));
        }
        if self.trace.blocks.len() + blocks.len() > u32::MAX as usize || self.trace.rows.len() >= u32::MAX as usize - 1
        {
            return Err(self.err(line, None, "the trace is too large (more than 2^32 rows or block ids)"));
        }
        let need = self.bytes_with(blocks.len());
        if need > self.budget_bytes {
            return Err(self.over_budget(line, need));
        }
        let output = if output == 0 {
            self.trace.zero_output_rows += 1;
            1
        } else {
            output
        };
        let off = self.trace.blocks.len();
        for &b in blocks {
            let d = self.block(b);
            self.trace.blocks.push(d);
        }
        let len = self.trace.blocks.len() - off;
        self.trace.rows.push(TraceRow {
            t_ns,
            input: input as u32,
            output: output as u32,
            session,
            turn,
            blocks_off: off as u32,
            blocks_len: len as u32,
            line: line.min(u64::from(u32::MAX)) as u32,
        });
        Ok(())
    }
}

fn open(path: &Path) -> Result<BufReader<File>, TraceError> {
    let f = File::open(path).map_err(|e| TraceError {
        file: path.display().to_string(),
        line: None,
        column: None,
        message: format!("cannot read the trace: {e}"),
    })?;
    Ok(BufReader::with_capacity(1 << 16, f))
}

/// Detects the format from the first non-empty line.
pub fn detect(first_line: &str) -> Option<Format> {
    let l = first_line.trim_start_matches('\u{feff}').trim();
    if l.starts_with('{') {
        if l.contains("dynamo.request.trace") {
            return Some(Format::Dynamo);
        }
        if l.contains("\"resourceSpans\"") {
            return Some(Format::Otel);
        }
        return (l.contains("\"input_length\"") || l.contains("\"hash_ids\"")).then_some(Format::Mooncake);
    }
    let cols: Vec<&str> = l.split(',').map(|c| c.trim().trim_matches('"')).collect();
    let has = |c: &str| cols.iter().any(|x| x.eq_ignore_ascii_case(c));
    if has("ContextTokens") && has("GeneratedTokens") {
        Some(Format::Azure)
    } else if has("Request tokens") && has("Response tokens") {
        Some(Format::BurstGpt)
    } else if has("arrival_s") && has("input_tokens") {
        Some(Format::Native)
    } else {
        None
    }
}

/// Reads a trace file.
pub fn read(path: &Path, opts: ReadOptions) -> Result<Trace, TraceError> {
    let file = path.display().to_string();
    let (r, format) = open_detected(path, opts.format)?;
    read_from(r, &file, format, opts.skip_bad_rows)
}

/// Opens a trace (gzip-compressed or not, told by its magic bytes) and detects its format
/// from the first non-empty line unless `format` is given.
pub fn open_detected(path: &Path, format: Option<Format>) -> Result<(Box<dyn BufRead>, Format), TraceError> {
    let file = path.display().to_string();
    let mut raw = open(path)?;
    let gzip = raw
        .fill_buf()
        .map_err(|e| io_error(&file, e))?
        .starts_with(&[0x1f, 0x8b]);
    let mut r: Box<dyn BufRead> = if gzip {
        Box::new(BufReader::with_capacity(
            1 << 16,
            flate2::bufread::MultiGzDecoder::new(raw),
        ))
    } else {
        Box::new(raw)
    };
    let format = match format {
        Some(f) => f,
        None => {
            let buf = r.fill_buf().map_err(|e| super::calls::stream_err(&file, 1, gzip, &e))?;
            let text = String::from_utf8_lossy(&buf[..buf.len().min(4096)]).into_owned();
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            detect(first).ok_or_else(|| TraceError {
                file: file.clone(),
                line: Some(1),
                column: None,
                message: format!(
                    "cannot tell the trace format from the first line; set format = {FORMAT_NAMES} (native CSV needs the columns arrival_s and input_tokens; Azure: TIMESTAMP,ContextTokens,GeneratedTokens; BurstGPT: Timestamp,...,Request tokens,Response tokens; Mooncake: JSON lines with input_length; Dynamo: dynamo.request.trace.v1 events; OTel: resourceSpans; any other per-call log: format = \"sessions\" with columns = {{ ... }})"
                ),
            })?
        }
    };
    Ok((r, format))
}

/// Reads a trace of a known format from any reader (`file` names it in messages).
pub fn read_from(r: impl Read, file: &str, format: Format, skip: bool) -> Result<Trace, TraceError> {
    let mut b = Builder::new(file, format, skip);
    match format {
        Format::Mooncake => read_mooncake(r, &mut b)?,
        Format::Native => read_native(r, &mut b)?,
        Format::Azure => read_azure(r, &mut b)?,
        Format::BurstGpt => read_burstgpt(r, &mut b)?,
        Format::Dynamo => super::dynamo::read(r, &mut b)?,
        Format::Otel => super::otel::read(r, &mut b, &super::otel::OtelOptions::default())?,
        Format::Sessions => {
            return Err(TraceError {
                file: file.to_string(),
                line: None,
                column: None,
                message: "format = \"sessions\" needs a `columns = { ... }` mapping".into(),
            });
        }
    }
    Ok(b.trace)
}

#[derive(Deserialize)]
struct MooncakeRow {
    timestamp: f64,
    input_length: u64,
    output_length: u64,
    #[serde(default)]
    hash_ids: Vec<u64>,
}

/// Milliseconds to ns: the range every reader shares ([`super::calls::ms_ns`]; 1e15 ms,
/// the bound before, was clamped to 2^64 ns without a word).
fn ms_to_ns(ms: f64) -> Option<u64> {
    super::calls::ms_ns(ms)
}

fn secs_to_ns(s: f64) -> Option<u64> {
    (0.0..=1e10).contains(&s).then(|| (s * 1e9).round() as u64)
}

fn read_mooncake(r: impl Read, b: &mut Builder) -> Result<(), TraceError> {
    let mut lines = Lines::new(r, &b.trace.file);
    while let Some((n, line)) = lines.next_line()? {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                b.bad(e)?;
                continue;
            }
        };
        let l = line.trim();
        if l.is_empty() {
            continue;
        }
        // An object, never an array read field by field in order.
        let row: MooncakeRow = match serde_json::from_str::<super::calls::Obj<MooncakeRow>>(l) {
            Ok(row) => row.0,
            Err(e) => {
                let msg = e.to_string();
                // serde_json names the missing or mistyped field in its message.
                let col = ["timestamp", "input_length", "output_length", "hash_ids"]
                    .into_iter()
                    .find(|c| msg.contains(&format!("`{c}`")))
                    .or_else(|| field_at(l, e.column()));
                let err = b.err(n, col, format!("{msg} (character {})", e.column()));
                b.bad(err)?;
                continue;
            }
        };
        let Some(t) = ms_to_ns(row.timestamp) else {
            let err = b.err(
                n,
                Some("timestamp"),
                format!("must be milliseconds in [0, 1.8e13], got {}", row.timestamp),
            );
            b.bad(err)?;
            continue;
        };
        b.push(
            n,
            t,
            row.input_length,
            row.output_length,
            NO_SESSION,
            u32::MAX,
            &row.hash_ids,
        )?;
    }
    Ok(())
}

/// The JSON key whose value contains character `col` (1-based) of `line`, best effort.
fn field_at(line: &str, col: usize) -> Option<&'static str> {
    // serde_json counts bytes; step back to a char boundary (a BOM or `ü` is several bytes).
    let end = (0..=col.min(line.len()))
        .rev()
        .find(|&i| line.is_char_boundary(i))
        .unwrap_or(0);
    let upto = &line[..end];
    ["timestamp", "input_length", "output_length", "hash_ids"]
        .into_iter()
        .filter_map(|k| upto.rfind(&format!("\"{k}\"")).map(|p| (p, k)))
        .max()
        .map(|(_, k)| k)
}

/// A CSV reader with the header's column positions.
struct Csv<R: Read> {
    rdr: csv::Reader<Capped<R>>,
    header: Vec<String>,
}

impl<R: Read> Csv<R> {
    /// Reads and checks the header (`known`: see [`check_header`]).
    fn new(r: R, file: &str, known: Option<&[&str]>) -> Result<Self, TraceError> {
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(true)
            .from_reader(Capped::new(r));
        let header: Vec<String> = rdr
            .headers()
            .map_err(|e| csv_error(file, e, Some(1)))?
            .iter()
            .map(|h| h.trim().to_string())
            .collect();
        check_header(&header, known, file)?;
        Ok(Csv { rdr, header })
    }

    fn col(&self, name: &str, file: &str) -> Result<usize, TraceError> {
        self.opt(name).ok_or_else(|| TraceError {
            file: file.to_string(),
            line: Some(1),
            column: None,
            message: format!("the header lacks the column `{name}` (has: {})", self.header.join(", ")),
        })
    }

    fn opt(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h.eq_ignore_ascii_case(name))
    }
}

/// Field `i` of `rec`, or an error naming the column.
fn field<'r>(rec: &'r csv::StringRecord, i: usize, name: &str, b: &Builder, line: u64) -> Result<&'r str, TraceError> {
    rec.get(i)
        .map(str::trim)
        .ok_or_else(|| b.err(line, Some(name), format!("missing (the row has {} fields)", rec.len())))
}

fn int(rec: &csv::StringRecord, i: usize, name: &str, b: &Builder, line: u64) -> Result<u64, TraceError> {
    let s = field(rec, i, name, b, line)?;
    s.parse::<u64>()
        .or_else(|e| {
            // Some exports write counts as `12.0`.
            s.parse::<f64>()
                .ok()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
                .map(|f| f as u64)
                .ok_or(e)
        })
        .map_err(|_| b.err(line, Some(name), format!("expected a whole number >= 0, got `{s}`")))
}

fn float_secs(rec: &csv::StringRecord, i: usize, name: &str, b: &Builder, line: u64) -> Result<u64, TraceError> {
    let s = field(rec, i, name, b, line)?;
    s.parse::<f64>()
        .ok()
        .and_then(secs_to_ns)
        .ok_or_else(|| b.err(line, Some(name), format!("expected seconds >= 0, got `{s}`")))
}

/// A CSV reader error as a trace error (a line-cap error names its line, not a record).
fn csv_error(file: &str, e: csv::Error, line: Option<u64>) -> TraceError {
    let line = e.position().map(csv::Position::line).or(line);
    let message = format!("malformed CSV: {e}");
    match e.into_kind() {
        csv::ErrorKind::Io(io) => io_error(file, io),
        _ => TraceError {
            file: file.to_string(),
            line,
            column: None,
            message,
        },
    }
}

fn csv_loop<R: Read>(
    c: &mut Csv<R>,
    b: &mut Builder,
    mut row: impl FnMut(&csv::StringRecord, u64, &mut Builder) -> Result<(), TraceError>,
) -> Result<(), TraceError> {
    let mut rec = csv::StringRecord::new();
    loop {
        match c.rdr.read_record(&mut rec) {
            Ok(false) => break,
            Ok(true) => {
                let line = rec.position().map_or(0, csv::Position::line);
                if rec.iter().all(|f| f.trim().is_empty()) {
                    continue;
                }
                let checked = check_width(rec.len(), c.header.len(), &b.trace.file, line);
                if let Err(e) = checked.and_then(|()| row(&rec, line, b)) {
                    b.bad(e)?;
                }
            }
            // An I/O error (a line beyond the cap included) ends the read whatever the options.
            Err(e) if e.is_io_error() => return Err(csv_error(&b.trace.file, e, None)),
            Err(e) => {
                let err = csv_error(&b.trace.file, e, None);
                b.bad(err)?;
            }
        }
    }
    Ok(())
}

/// Every column of the native CSV (the first, fourth and fifth are required).
pub const NATIVE_COLUMNS: [&str; 6] = [
    "arrival_s",
    "session_id",
    "turn",
    "input_tokens",
    "output_tokens",
    "block_ids",
];

fn read_native(r: impl Read, b: &mut Builder) -> Result<(), TraceError> {
    let mut c = Csv::new(r, &b.trace.file, Some(&NATIVE_COLUMNS))?;
    let file = b.trace.file.clone();
    let arrival = c.col("arrival_s", &file)?;
    let input = c.col("input_tokens", &file)?;
    let output = c.col("output_tokens", &file)?;
    let session = c.opt("session_id");
    let turn = c.opt("turn");
    let blocks = c.opt("block_ids");
    let mut ids: Vec<u64> = Vec::new();
    csv_loop(&mut c, b, |rec, line, b| {
        let t = float_secs(rec, arrival, "arrival_s", b, line)?;
        let i = int(rec, input, "input_tokens", b, line)?;
        let o = int(rec, output, "output_tokens", b, line)?;
        let s = match session {
            Some(k) => rec.get(k).map_or("", str::trim),
            None => "",
        };
        let tn = match turn {
            Some(k) if !rec.get(k).map_or("", str::trim).is_empty() => {
                let v = int(rec, k, "turn", b, line)?;
                u32::try_from(v).map_err(|_| b.err(line, Some("turn"), format!("{v} is too large")))?
            }
            _ => u32::MAX,
        };
        ids.clear();
        if let Some(k) = blocks {
            for tok in rec.get(k).unwrap_or("").split_whitespace() {
                ids.push(tok.parse().map_err(|_| {
                    b.err(
                        line,
                        Some("block_ids"),
                        format!("expected space-separated whole numbers, got `{tok}`"),
                    )
                })?);
            }
        }
        let sid = b.session(s);
        b.push(line, t, i, o, sid, tn, &ids)
    })
}

/// Parses `YYYY-MM-DD HH:MM:SS[.fffffffff]` (also with `T`, an optional trailing `Z` or
/// `+00:00`) into ns since 1970, UTC. Impossible dates (Feb 29 2023, Apr 31) are refused,
/// never rolled over into the next month; years outside 1970..=2500 too.
pub fn parse_datetime(s: &str) -> Option<u64> {
    let s = s.trim().trim_end_matches('Z');
    let s = s.strip_suffix("+00:00").unwrap_or(s);
    // jiff also reads a bare date or `HH:MM`; the traces always write seconds.
    let (_, time) = s.split_once([' ', 'T'])?;
    if time.split(':').count() != 3 {
        return None;
    }
    let dt: jiff::civil::DateTime = s.parse().ok()?;
    if !(1970..=2500).contains(&dt.year()) {
        return None;
    }
    let ts = jiff::tz::TimeZone::UTC.to_timestamp(dt).ok()?;
    u64::try_from(ts.as_nanosecond()).ok()
}

fn read_azure(r: impl Read, b: &mut Builder) -> Result<(), TraceError> {
    let mut c = Csv::new(r, &b.trace.file, None)?;
    let file = b.trace.file.clone();
    let ts = c.col("TIMESTAMP", &file)?;
    let ctx = c.col("ContextTokens", &file)?;
    let gen_ = c.col("GeneratedTokens", &file)?;
    csv_loop(&mut c, b, |rec, line, b| {
        let s = field(rec, ts, "TIMESTAMP", b, line)?;
        let t = parse_datetime(s).ok_or_else(|| {
            b.err(
                line,
                Some("TIMESTAMP"),
                format!("expected a date and time like 2023-11-16 18:15:46.6805900, got `{s}`"),
            )
        })?;
        let i = int(rec, ctx, "ContextTokens", b, line)?;
        let o = int(rec, gen_, "GeneratedTokens", b, line)?;
        b.push(line, t, i, o, NO_SESSION, u32::MAX, &[])
    })
}

fn read_burstgpt(r: impl Read, b: &mut Builder) -> Result<(), TraceError> {
    let mut c = Csv::new(r, &b.trace.file, None)?;
    let file = b.trace.file.clone();
    let ts = c.col("Timestamp", &file)?;
    let req = c.col("Request tokens", &file)?;
    let resp = c.col("Response tokens", &file)?;
    csv_loop(&mut c, b, |rec, line, b| {
        let t = float_secs(rec, ts, "Timestamp", b, line)?;
        let i = int(rec, req, "Request tokens", b, line)?;
        let o = int(rec, resp, "Response tokens", b, line)?;
        b.push(line, t, i, o, NO_SESSION, u32::MAX, &[])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, f: Format) -> Result<Trace, TraceError> {
        read_from(text.as_bytes(), "t", f, false)
    }

    #[test]
    fn detects_every_format() {
        assert_eq!(
            detect(r#"{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}"#),
            Some(Format::Mooncake)
        );
        assert_eq!(detect("TIMESTAMP,ContextTokens,GeneratedTokens"), Some(Format::Azure));
        assert_eq!(
            detect("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"),
            Some(Format::BurstGpt)
        );
        assert_eq!(
            detect("arrival_s,session_id,turn,input_tokens,output_tokens,block_ids"),
            Some(Format::Native)
        );
        assert_eq!(detect("a,b,c"), None);
    }

    #[test]
    fn mooncake_rows_and_dense_blocks() {
        let t = parse(
            "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 5, \"hash_ids\": [7, 9]}\n\n{\"timestamp\": 1500, \"input_length\": 1600, \"output_length\": 0, \"hash_ids\": [7, 9, 11, 12]}\n",
            Format::Mooncake,
        )
        .unwrap();
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[1].t_ns, 1_500_000_000);
        assert_eq!(t.rows[1].line, 3);
        assert_eq!(t.rows[1].blocks(&t.blocks), &[0, 1, 2, 3]);
        assert_eq!(t.raw_blocks, vec![7, 9, 11, 12]);
        assert_eq!(t.rows[1].output, 1);
        assert_eq!(t.zero_output_rows, 1);
    }

    #[test]
    fn dense_ids_survive_switching_from_table_to_map() {
        let t = parse(
            "arrival_s,input_tokens,output_tokens,block_ids\n0,5,5,5 9\n1,5,5,1099511627776 5\n2,5,5,9 7\n",
            Format::Native,
        )
        .unwrap();
        assert_eq!(t.blocks, vec![0, 1, 2, 0, 1, 3]);
        assert_eq!(t.raw_blocks, vec![5, 9, 1 << 40, 7]);
    }

    #[test]
    fn mooncake_malformed_names_line_and_field() {
        let e = parse(
            "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5}\n{\"timestamp\": 1, \"input_length\": \"x\", \"output_length\": 5}\n",
            Format::Mooncake,
        )
        .unwrap_err();
        assert_eq!(e.line, Some(2));
        assert_eq!(e.column.as_deref(), Some("input_length"));
        assert!(e.to_string().starts_with("t:2: column `input_length`: "), "{e}");
        let e = parse("{\"timestamp\": 0, \"output_length\": 5}\n", Format::Mooncake).unwrap_err();
        assert_eq!(e.column.as_deref(), Some("input_length"), "{e}");
        let e = parse("{\"timestamp\": 0, \"input_length\": 10,\n", Format::Mooncake).unwrap_err();
        assert_eq!(e.line, Some(1));
    }

    #[test]
    fn skip_bad_rows_counts_them() {
        let t = read_from(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\nbad,1,2\n2023-11-16 18:15:47.0000000,0,2\n2023-11-16 18:15:50.9951690,396,109\n"
                .as_bytes(),
            "a.csv",
            Format::Azure,
            true,
        )
        .unwrap();
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.skipped, 2);
        assert!(
            t.skip_messages[0].starts_with("a.csv:3: column `TIMESTAMP`"),
            "{:?}",
            t.skip_messages
        );
        assert!(
            t.skip_messages[1].contains("a.csv:4: column `ContextTokens`"),
            "{:?}",
            t.skip_messages
        );
        assert_eq!(t.rows[1].t_ns - t.rows[0].t_ns, 4_314_579_000);
        assert!(t.notes()[0].contains("skipped 2 malformed rows"));
    }

    #[test]
    fn azure_malformed() {
        let e = parse(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,4x4\n",
            Format::Azure,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "t:2: column `GeneratedTokens`: expected a whole number >= 0, got `4x4`"
        );
        let e = parse("TIMESTAMP,Context\n", Format::Azure).unwrap_err();
        assert!(e.message.contains("lacks the column `ContextTokens`"), "{e}");
    }

    #[test]
    fn datetime() {
        assert_eq!(parse_datetime("1970-01-02 00:00:01.5"), Some(86_401_500_000_000));
        assert_eq!(
            parse_datetime("2023-11-16T18:15:46Z").map(|t| t / 1_000_000_000),
            Some(1_700_158_546)
        );
        assert_eq!(parse_datetime("2023-13-16 18:15:46"), None);
        // Impossible calendar dates are refused, not normalised into the next month.
        assert_eq!(parse_datetime("2023-02-29 00:00:00"), None);
        assert_eq!(parse_datetime("2023-04-31 00:00:00"), None);
        assert_eq!(parse_datetime("2023-11-16 24:00:00"), None);
        assert_eq!(parse_datetime("2023-11-16 18:60:00"), None);
        assert_eq!(parse_datetime("2023-11-16"), None);
        assert_eq!(parse_datetime("1969-12-31 23:59:59"), None);
        assert_eq!(
            parse_datetime("2024-02-29 00:00:00").map(|t| t / 1_000_000_000),
            Some(1_709_164_800)
        );
        assert_eq!(
            parse_datetime("2023-11-16 18:15:46.6805900").map(|t| t % 1_000_000_000),
            Some(680_590_000)
        );
        assert_eq!(parse_datetime("yesterday"), None);
    }

    #[test]
    fn burstgpt_rows_and_errors() {
        let text = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,0,1087,API log\n";
        let t = parse(text, Format::BurstGpt).unwrap();
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[1].t_ns, 45_000_000_000);
        assert_eq!(t.zero_output_rows, 1);
        let e = parse(
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,-3,18,490,x\n",
            Format::BurstGpt,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "t:2: column `Request tokens`: expected a whole number >= 0, got `-3`"
        );
        let e = parse(
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\nsoon,ChatGPT,3,18,490,x\n",
            Format::BurstGpt,
        )
        .unwrap_err();
        assert_eq!(e.column.as_deref(), Some("Timestamp"));
    }

    #[test]
    fn native_rows_sessions_and_errors() {
        let text = "arrival_s,session_id,turn,input_tokens,output_tokens,block_ids\n0.5,a,0,1024,10,1 2\n1.0,,,20,5,\n2.5,a,1,2048,10,1 2 3 4\n";
        let t = parse(text, Format::Native).unwrap();
        assert_eq!(t.rows.len(), 3);
        assert_eq!(t.rows[0].session, 0);
        assert_eq!(t.rows[1].session, NO_SESSION);
        assert_eq!(t.rows[1].turn, u32::MAX);
        assert_eq!(t.rows[2].blocks(&t.blocks), &[0, 1, 2, 3]);
        assert_eq!(t.session_names, vec!["a".to_string()]);
        // Minimal native: only the required columns.
        let t = parse("arrival_s,input_tokens,output_tokens\n0,5,5\n", Format::Native).unwrap();
        assert_eq!(t.rows.len(), 1);
        let e = parse(
            "arrival_s,session_id,turn,input_tokens,output_tokens,block_ids\n0.5,a,0,1024,10,1 x\n",
            Format::Native,
        )
        .unwrap_err();
        assert_eq!(e.line, Some(2));
        assert_eq!(e.column.as_deref(), Some("block_ids"));
        let e = parse("arrival_s,input_tokens,output_tokens\n-1,5,5\n", Format::Native).unwrap_err();
        assert_eq!(e.column.as_deref(), Some("arrival_s"));
        let e = parse("arrival_s,input_tokens,output_tokens\n1,5\n", Format::Native).unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(
            e.message.starts_with("the row has 2 fields but the header has 3"),
            "{e}"
        );
    }

    #[test]
    fn mooncake_non_ascii_and_bom_do_not_panic() {
        // Regression: slicing the error message at a byte inside `ü` panicked.
        let text = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [0]}\nü\n";
        let e = parse(text, Format::Mooncake).unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        let t = read_from(text.as_bytes(), "t", Format::Mooncake, true).unwrap();
        assert_eq!((t.rows.len(), t.skipped), (1, 1));
        let e = parse(
            "{\"timestamp\": 0, \"input_length\": \"ü\", \"output_length\": 5}\n",
            Format::Mooncake,
        )
        .unwrap_err();
        assert_eq!(e.column.as_deref(), Some("input_length"), "{e}");
        // A UTF-8 BOM before the first row is not part of it.
        let bom = "\u{feff}{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [0]}\n";
        for skip in [false, true] {
            let t = read_from(bom.as_bytes(), "t", Format::Mooncake, skip).unwrap();
            assert_eq!((t.rows.len(), t.skipped), (1, 0));
        }
        let e = read_from(&b"{\"timestamp\": 0, \xff}\n"[..], "t", Format::Mooncake, false).unwrap_err();
        assert_eq!(e.to_string(), "t:1: not UTF-8 (byte 18)");
    }

    #[test]
    fn memory_budget_is_checked_on_every_row_before_the_arenas_grow() {
        // Checked every 65,536 rows, rows of millions of block ids would allocate gigabytes
        // first: every row is checked with the capacity the arenas grow to, before they grow.
        let mut b = Builder::new("t", Format::Native, false);
        b.budget_bytes = 8 << 20;
        let ids: Vec<u64> = (0..100_000).collect();
        let mut kept = 0;
        let mut err = None;
        for i in 0..100 {
            match b.push(i + 2, 0, 200_000, 1, NO_SESSION, u32::MAX, &ids) {
                Ok(()) => kept += 1,
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        let e = err.expect("refused within 100 rows");
        assert!((1..10).contains(&kept), "{kept}");
        assert!(
            e.message.contains("would take") && e.message.contains("cut the file"),
            "{e}"
        );
        assert!(b.bytes_with(0) <= 8 << 20);
        // More block ids than prompt tokens: a bad row naming the column.
        let e = parse(
            "arrival_s,input_tokens,output_tokens,block_ids\n0,2,1,1 2 3\n",
            Format::Native,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "t:2: column `block_ids`: 3 block ids for a prompt of 2 tokens: a block holds at least one token"
        );
    }

    #[test]
    fn mooncake_rows_are_objects_and_times_stay_in_range() {
        let e = parse("[0, 10, 5, [0]]\n", Format::Mooncake).unwrap_err();
        assert!(e.message.contains("expected a JSON object"), "{e}");
        // 1e15 ms was accepted and clamped to 2^64 ns.
        let e = parse(
            "{\"timestamp\": 1e15, \"input_length\": 10, \"output_length\": 5}\n",
            Format::Mooncake,
        )
        .unwrap_err();
        assert_eq!(e.column.as_deref(), Some("timestamp"), "{e}");
    }

    #[test]
    fn endless_line_is_an_error_not_an_abort() {
        let e = read_from(std::io::repeat(b' ').take(40 << 20), "t", Format::Mooncake, true).unwrap_err();
        assert!(e.message.contains("line 1 is longer than 16 MiB"), "{e}");
        let mut csv = b"arrival_s,input_tokens,output_tokens\n".to_vec();
        csv.extend(std::iter::repeat_n(b'1', 20 << 20));
        let e = read_from(&csv[..], "t", Format::Native, true).unwrap_err();
        assert!(e.message.contains("line 2 is longer than 16 MiB"), "{e}");
    }

    #[test]
    fn csv_rows_and_headers_are_strict() {
        // A missing middle field no longer shifts the next value into its column.
        for (text, want) in [
            (
                "arrival_s,input_tokens,output_tokens\n0,5\n",
                "t:2: the row has 2 fields but the header has 3",
            ),
            (
                "arrival_s,input_tokens,output_tokens\n0,5,5,9\n",
                "t:2: the row has 4 fields but the header has 3",
            ),
            (
                "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,374\n",
                "t:2: the row has 2 fields",
            ),
            (
                "arrival_s,input_tokens,output_tokens,input_tokens\n0,5,5,6\n",
                "t:1: column `input_tokens`: appears twice",
            ),
            (
                "arrival_s,,input_tokens,output_tokens\n0,,5,5\n",
                "t:1: header column 2 is empty",
            ),
            (
                "arrival_s,sesion_id,input_tokens,output_tokens\n0,a,5,5\n",
                "t:1: column `sesion_id`: unknown column",
            ),
            (
                "Timestamp,Model,Request tokens,Response tokens,Total tokens,Model\n",
                "t:1: column `Model`: appears twice",
            ),
        ] {
            let f = detect(text.lines().next().unwrap()).unwrap();
            let e = parse(text, f).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
        // A short row is skipped whole under skip_bad_rows, never read shifted.
        let t = read_from(
            "arrival_s,input_tokens,output_tokens\n0,5\n1,6,7\n".as_bytes(),
            "t",
            Format::Native,
            true,
        )
        .unwrap();
        assert_eq!((t.rows.len(), t.skipped, t.rows[0].input), (1, 1, 6));
        // A BOM before a CSV header is dropped.
        let t = parse(
            "\u{feff}TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,374,44\n",
            Format::Azure,
        )
        .unwrap();
        assert_eq!(t.rows.len(), 1);
        // Impossible dates are refused, naming the column.
        let e = parse(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-29 18:15:46,374,44\n",
            Format::Azure,
        )
        .unwrap_err();
        assert_eq!(e.column.as_deref(), Some("TIMESTAMP"));
    }
}
