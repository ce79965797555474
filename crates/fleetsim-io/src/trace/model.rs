//! The trace model every reader builds and every consumer reads: [`Trace`] and its compact
//! [`TraceRow`]s, the recorded per-call timing of session-shaped formats ([`Calls`]), the
//! one error type, and the `Builder` through which each reader pushes rows (dense block
//! ids, interned sessions, the memory budget, `skip_bad_rows` accounting). It names no
//! reader: the readers import it, and [`super::read`] dispatches to them.

use fleetsim_core::time::{MAX_TIMESTAMP_NS, checked_to_ns};
use rustc_hash::FxHashMap;

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

/// Chained prefix hashes of a block list: item `k` identifies the first `k + 1` blocks as a
/// whole (two rows share it exactly when they share those blocks in order), which is how
/// session inference and the prefix statistics tell a shared prefix from a shared block.
pub fn prefix_chain(blocks: &[u32]) -> impl Iterator<Item = u64> + '_ {
    blocks.iter().scan(0x6A09_E667_F3BC_C908u64, |h, &b| {
        *h = fleetsim_core::content::mix(*h, u64::from(b));
        Some(*h)
    })
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
    /// Rows with 0 prompt tokens skipped under `skip_bad_rows` (also in `skipped`): errored
    /// calls are often logged with 0 tokens.
    pub zero_input_rows: u64,
    /// Rows left out by the `where` row filter.
    pub filtered_rows: u64,
    /// Recorded per-call timing of session-shaped formats (`dynamo`, `otel`, `sessions`).
    pub calls: Option<Box<Calls>>,
}

/// Rows of `trace` in arrival order (ties: file order).
pub fn arrival_order(trace: &Trace) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..trace.rows.len() as u32).collect();
    idx.sort_by_key(|&i| (trace.rows[i as usize].t_ns, i));
    idx
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
        if self.filtered_rows > 0 {
            out.push(format!(
                "{}: {} rows left out by the `where` filter",
                self.file, self.filtered_rows
            ));
        }
        if self.zero_input_rows > 0 {
            out.push(format!(
                "{}: {} of the skipped rows had 0 prompt tokens (errored calls?)",
                self.file, self.zero_input_rows
            ));
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
    pub(super) fn push(&mut self, r: RawRow<'_>) -> Result<(), TraceError> {
        if let Some(e) = self.refusal(&r) {
            if r.input == 0 && self.skip {
                self.trace.zero_input_rows += 1;
            }
            return self.bad(e);
        }
        if self.trace.blocks.len() + r.blocks.len() > u32::MAX as usize
            || self.trace.rows.len() >= u32::MAX as usize - 1
        {
            return Err(self.err(
                r.line,
                None,
                "the trace is too large (more than 2^32 rows or block ids)",
            ));
        }
        let need = self.bytes_with(r.blocks.len());
        if need > self.budget_bytes {
            return Err(self.over_budget(r.line, need));
        }
        self.keep(r);
        Ok(())
    }

    /// Why a row cannot be a request (a malformed row, which `skip_bad_rows` may skip): no
    /// prompt token, more tokens than a request holds, or more block ids than tokens.
    fn refusal(&self, r: &RawRow<'_>) -> Option<TraceError> {
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
        let (line, input, output) = (r.line, r.input, r.output);
        if input == 0 {
            return Some(self.err(
                line,
                Some(in_col),
                "a request needs at least 1 prompt token, got 0 (errored calls are often logged with 0 tokens: leave them out with a `where` filter, or set skip_bad_rows = true to count and skip them)",
            ));
        }
        if input > u64::from(u32::MAX) || output > u64::from(u32::MAX) || input + output > u64::from(u32::MAX) {
            let col = if input > u64::from(u32::MAX) { in_col } else { out_col };
            return Some(self.err(
                line,
                Some(col),
                format!("{input} + {output} tokens is above the 2^32 - 1 a request may hold"),
            ));
        }
        if r.blocks.len() as u64 > input {
            return Some(self.err(
                line,
                Some(blocks_col),
                format!(
                    "{} block ids for a prompt of {input} tokens: a block holds at least one token",
                    r.blocks.len()
                ),
            ));
        }
        None
    }

    /// Keeps a checked request: its block ids as dense ids in the arena, a zero output as
    /// one token (counted).
    fn keep(&mut self, r: RawRow<'_>) {
        let output = if r.output == 0 {
            self.trace.zero_output_rows += 1;
            1
        } else {
            r.output
        };
        let off = self.trace.blocks.len();
        for &b in r.blocks {
            let d = self.block(b);
            self.trace.blocks.push(d);
        }
        let len = self.trace.blocks.len() - off;
        self.trace.rows.push(TraceRow {
            t_ns: r.t_ns,
            input: r.input as u32,
            output: output as u32,
            session: r.session,
            turn: r.turn,
            blocks_off: off as u32,
            blocks_len: len as u32,
            line: r.line.min(u64::from(u32::MAX)) as u32,
        });
    }
}

/// One request as a reader found it, before the builder checks and keeps it.
#[derive(Clone, Copy, Debug)]
pub(super) struct RawRow<'a> {
    /// 1-based line.
    pub(super) line: u64,
    /// Arrival, ns from the format's time origin.
    pub(super) t_ns: u64,
    /// Prompt tokens.
    pub(super) input: u64,
    /// Output tokens.
    pub(super) output: u64,
    /// Interned session id, or [`NO_SESSION`].
    pub(super) session: u32,
    /// Turn number as written, or `u32::MAX`.
    pub(super) turn: u32,
    /// Block ids (prefix hashes) as written.
    pub(super) blocks: &'a [u64],
}

impl RawRow<'_> {
    /// A request without session, turn or block ids.
    pub(super) fn new(line: u64, t_ns: u64, input: u64, output: u64) -> Self {
        RawRow {
            line,
            t_ns,
            input,
            output,
            session: NO_SESSION,
            turn: u32::MAX,
            blocks: &[],
        }
    }
}

/// No value recorded.
pub use fleetsim_core::workload::pacing::NONE;
/// Recorded per-call timing, parallel to [`Trace::rows`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Calls {
    /// Recorded end (last token at the client) in the rows' time base, or [`NONE`].
    pub end_ns: Vec<u64>,
    /// Recorded time to first token, or [`NONE`].
    pub ttft_ns: Vec<u64>,
    /// Recorded think (client) time before the call, or [`NONE`].
    pub think_ns: Vec<u64>,
    /// Model index in [`Calls::models`], or `u32::MAX`.
    pub model: Vec<u32>,
    /// Model names.
    pub models: Vec<String>,
    /// Index of each name in [`Calls::models`] (a trace may name a model per call).
    pub model_ids: rustc_hash::FxHashMap<String, u32>,
    /// Durations of recorded tool calls (Dynamo `tool_end`/`tool_error`, OTel `execute_tool`).
    pub tool_ns: Vec<u64>,
    /// Tokens per block hash, when the trace says (Dynamo: `replay.trace_block_size`).
    pub block_tokens: Option<u32>,
    /// Records that are not inference calls and were skipped (OTel spans of other
    /// operations, Dynamo events of other types), counted for `sim trace inspect`.
    pub other_records: u64,
    /// Rows whose start is an offset within their session (`offset_s`), placed by
    /// `session_arrival`.
    pub offsets: bool,
    /// The recorded length of a part every call repeats (a harness's tool definitions or
    /// system prompt: `columns.shared_prefix_tokens` or `columns.shared_prefix_chars`), per
    /// call, or [`NO_SHARED`]; empty when no such column is mapped.
    pub shared_len: Vec<u32>,
    /// Whether [`Calls::shared_len`] counts characters (`shared_prefix_chars`), not tokens.
    pub shared_in_chars: bool,
}

/// No recorded shared part ([`Calls::shared_len`]).
pub const NO_SHARED: u32 = u32::MAX;

/// One call's recorded timing.
#[derive(Clone, Copy, Debug)]
pub struct Timing<'a> {
    /// End, ns, or [`NONE`].
    pub end_ns: u64,
    /// TTFT, ns, or [`NONE`].
    pub ttft_ns: u64,
    /// Think time before the call, ns, or [`NONE`].
    pub think_ns: u64,
    /// Model name.
    pub model: Option<&'a str>,
}

impl Default for Timing<'_> {
    fn default() -> Self {
        Timing {
            end_ns: NONE,
            ttft_ns: NONE,
            think_ns: NONE,
            model: None,
        }
    }
}

impl Calls {
    /// Whether any call records its end.
    pub fn has_ends(&self) -> bool {
        self.end_ns.iter().any(|&e| e != NONE)
    }

    /// Whether any call records its think time.
    pub fn has_think(&self) -> bool {
        self.think_ns.iter().any(|&e| e != NONE)
    }

    /// Whether any call records latency (end or TTFT), for the fidelity readout.
    pub fn has_latency(&self) -> bool {
        self.has_ends() || self.ttft_ns.iter().any(|&e| e != NONE)
    }

    fn model_index(&mut self, m: Option<&str>) -> u32 {
        let Some(m) = m.filter(|m| !m.is_empty()) else {
            return u32::MAX;
        };
        if let Some(&i) = self.model_ids.get(m) {
            return i;
        }
        let i = self.models.len() as u32;
        self.models.push(m.to_string());
        self.model_ids.insert(m.to_string(), i);
        i
    }

    /// Whether the trace records the length of a part every call repeats.
    pub fn records_shared(&self) -> bool {
        self.shared_len.iter().any(|&n| n != NO_SHARED && n > 0)
    }

    /// The recorded shared part of row `r` (0 or [`NO_SHARED`]: none).
    pub fn shared_of(&self, r: usize) -> u32 {
        self.shared_len.get(r).copied().unwrap_or(NO_SHARED)
    }

    /// Model name of row `r`.
    pub fn model_of(&self, r: usize) -> Option<&str> {
        self.model
            .get(r)
            .and_then(|&m| self.models.get(m as usize))
            .map(String::as_str)
    }
}
/// Tokens per block id of `t`: what the trace says (Dynamo), else its format's default.
pub fn block_tokens(t: &Trace) -> u32 {
    t.calls
        .as_ref()
        .and_then(|c| c.block_tokens)
        .unwrap_or_else(|| t.format.map_or(512, Format::default_block_tokens))
}
/// Pushes one call: its row through the builder (which may count it as skipped) and, if
/// the row was kept, its timing.
pub(super) fn push_call(
    b: &mut Builder,
    calls: &mut Calls,
    r: RawRow<'_>,
    timing: Timing<'_>,
) -> Result<(), TraceError> {
    let before = b.trace.rows.len();
    b.push(r)?;
    if b.trace.rows.len() > before {
        // end, TTFT, think (8 bytes each) and the model index (4), plus a new model's name.
        let new_name = timing
            .model
            .filter(|m| !m.is_empty() && !calls.model_ids.contains_key(*m))
            .map_or(0, |m| 2 * (m.len() as u64 + 32));
        b.charge(r.line, 28 + new_name)?;
        calls.end_ns.push(timing.end_ns);
        calls.ttft_ns.push(timing.ttft_ns);
        calls.think_ns.push(timing.think_ns);
        let m = calls.model_index(timing.model);
        calls.model.push(m);
    }
    Ok(())
}
/// A read error of the underlying stream (a corrupt or truncated gzip member, an I/O error)
/// after `line` lines: never skippable, the rest of the file cannot be trusted.
pub fn stream_err(file: &str, line: u64, gzip: bool, e: &std::io::Error) -> TraceError {
    let text = e.to_string();
    let compressed =
        gzip || matches!(
            e.kind(),
            std::io::ErrorKind::InvalidInput | std::io::ErrorKind::UnexpectedEof
        ) || text.contains("deflate")
            || text.contains("gzip");
    let what = if compressed {
        "corrupt or truncated compressed stream"
    } else {
        "cannot read the trace"
    };
    TraceError {
        file: file.to_string(),
        line: Some(line.max(1)),
        column: None,
        message: format!("{what}: {e}"),
    }
}
/// Milliseconds of a timestamp (finite, >= 0, within [`MAX_TIMESTAMP_NS`]) to ns, through
/// the one checked conversion.
pub fn ms_ns(ms: f64) -> Option<u64> {
    checked_to_ns(ms, 1e6, MAX_TIMESTAMP_NS).ok()
}

/// Seconds (finite, >= 0) to ns.
pub fn s_ns(s: f64) -> Option<u64> {
    (ms_ns(s * 1e3)).filter(|_| s.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_chain_names_whole_prefixes() {
        let a: Vec<u64> = prefix_chain(&[1, 2, 3]).collect();
        let b: Vec<u64> = prefix_chain(&[1, 2, 4]).collect();
        let c: Vec<u64> = prefix_chain(&[2, 1]).collect();
        assert_eq!(a.len(), 3);
        assert_eq!(a[..2], b[..2]);
        assert_ne!(a[2], b[2]);
        // Same blocks in another order: another prefix.
        assert_ne!(a[1], c[1]);
        assert_eq!(prefix_chain(&[]).count(), 0);
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
            match b.push(RawRow {
                blocks: &ids,
                ..RawRow::new(i + 2, 0, 200_000, 1)
            }) {
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
    }

    #[test]
    fn conversions() {
        assert_eq!(ms_ns(1.5), Some(1_500_000));
        assert_eq!(ms_ns(-1.0), None);
        assert_eq!(ms_ns(f64::NAN), None);
        assert_eq!(s_ns(2.0), Some(2_000_000_000));
        assert_eq!(s_ns(f64::INFINITY), None);
    }
}
