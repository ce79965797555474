//! What session-shaped traces record beyond arrival and tokens: per call its recorded end,
//! TTFT, think time and model; the tool time between calls; and the reader options and line
//! reader the agent-trace readers (`dynamo`, `otel`, `sessions`) share.
//!
//! Every line is read through [`Lines`]: a byte order mark on the first line is dropped,
//! a line longer than [`MAX_LINE_BYTES`] is one malformed row (not an allocation of
//! gigabytes), invalid UTF-8 is a malformed row, and a corrupt or truncated gzip stream is
//! an error naming the last line read.

use std::io::{BufRead, Read};
use std::path::Path;

use super::parse::{Builder, Format, ReadOptions, Trace, TraceError, open_detected, read_from};
use super::session_log::ColumnMap;

/// No value recorded.
pub use fleetsim_core::workload::pacing::NONE;

/// Longest line an agent-trace reader accepts (64 MiB: a Dynamo event for a 1M-token
/// prompt is about 1.3 MB; an OTel export batch a few MB).
pub const MAX_LINE_BYTES: usize = 64 << 20;

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
}

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
        match self.models.iter().position(|x| x == m) {
            Some(i) => i as u32,
            None => {
                self.models.push(m.to_string());
                self.models.len() as u32 - 1
            }
        }
    }

    /// Model name of row `r`.
    pub fn model_of(&self, r: usize) -> Option<&str> {
        self.model
            .get(r)
            .and_then(|&m| self.models.get(m as usize))
            .map(String::as_str)
    }
}

/// Options of the agent-trace readers (from `[[workload.traces]]` or the command line).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentReadOptions {
    /// `sessions` format: which column holds what.
    pub columns: Option<ColumnMap>,
    /// `otel`: span attributes naming the session, tried in order before the trace id.
    pub session_attributes: Vec<String>,
}

/// The session attributes tried by default (then the trace id).
pub const DEFAULT_SESSION_ATTRIBUTES: [&str; 2] = ["gen_ai.conversation.id", "session.id"];

/// Tokens per block id of `t`: what the trace says (Dynamo), else its format's default.
pub fn block_tokens(t: &Trace) -> u32 {
    t.calls
        .as_ref()
        .and_then(|c| c.block_tokens)
        .unwrap_or_else(|| t.format.map_or(512, Format::default_block_tokens))
}

/// Reads a trace of any format; `agent` configures the session-shaped readers.
pub fn read(path: &Path, opts: ReadOptions, agent: &AgentReadOptions) -> Result<Trace, TraceError> {
    let file = path.display().to_string();
    let format = match (opts.format, &agent.columns) {
        (None, Some(_)) => Some(Format::Sessions),
        (f, _) => f,
    };
    let (r, format) = open_detected(path, format)?;
    read_any(r, &file, format, opts.skip_bad_rows, agent)
}

/// [`read`] from any reader of a known format.
pub fn read_any(
    r: impl Read,
    file: &str,
    format: Format,
    skip: bool,
    agent: &AgentReadOptions,
) -> Result<Trace, TraceError> {
    match format {
        Format::Otel => {
            let mut b = Builder::new(file, format, skip);
            super::otel::read(r, &mut b, &super::otel::OtelOptions::new(&agent.session_attributes))?;
            Ok(b.trace)
        }
        Format::Sessions => {
            let Some(cols) = &agent.columns else {
                return read_from(r, file, format, skip);
            };
            let mut b = Builder::new(file, format, skip);
            super::session_log::read(r, &mut b, cols)?;
            Ok(b.trace)
        }
        f => read_from(r, file, f, skip),
    }
}

/// Pushes one call: its row through the builder (which may count it as skipped) and, if
/// the row was kept, its timing.
#[allow(clippy::too_many_arguments)]
pub(super) fn push_call(
    b: &mut Builder,
    calls: &mut Calls,
    line: u64,
    t_ns: u64,
    input: u64,
    output: u64,
    session: u32,
    turn: u32,
    blocks: impl IntoIterator<Item = u64>,
    timing: Timing<'_>,
) -> Result<(), TraceError> {
    let before = b.trace.rows.len();
    b.push(line, t_ns, input, output, session, turn, blocks)?;
    if b.trace.rows.len() > before {
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

/// Milliseconds (finite, >= 0) to ns.
pub fn ms_ns(ms: f64) -> Option<u64> {
    (ms.is_finite() && (0.0..=1.8e13).contains(&ms)).then(|| (ms * 1e6).round() as u64)
}

/// Seconds (finite, >= 0) to ns.
pub fn s_ns(s: f64) -> Option<u64> {
    (ms_ns(s * 1e3)).filter(|_| s.is_finite())
}

/// A line of a line-oriented trace.
pub enum Line<'a> {
    /// The text (without its line break).
    Text(&'a str),
    /// The line is malformed (too long, not UTF-8); the message says why.
    Bad(String),
}

/// Reads lines with a length cap, counting them (1-based), dropping a BOM on line 1.
pub struct Lines<R> {
    r: R,
    buf: Vec<u8>,
    /// Number of the line last returned.
    pub line: u64,
    cap: usize,
}

impl<R: BufRead> Lines<R> {
    /// Lines of `r`, each at most `cap` bytes.
    pub fn new(r: R, cap: usize) -> Self {
        Lines {
            r,
            buf: Vec::new(),
            line: 0,
            cap,
        }
    }

    /// The next line and its number, or `None` at the end; `Err` is an I/O error of the
    /// stream.
    pub fn next_line(&mut self) -> std::io::Result<Option<(u64, Line<'_>)>> {
        self.buf.clear();
        let got = (&mut self.r)
            .take(self.cap as u64 + 1)
            .read_until(b'\n', &mut self.buf)?;
        if got == 0 {
            return Ok(None);
        }
        self.line += 1;
        if self.buf.len() > self.cap && self.buf.last() != Some(&b'\n') {
            // Drop the rest of the over-long line.
            let mut skipped = self.buf.len();
            loop {
                self.buf.clear();
                let n = (&mut self.r).take(1 << 20).read_until(b'\n', &mut self.buf)?;
                skipped += n;
                if n == 0 || self.buf.last() == Some(&b'\n') {
                    break;
                }
            }
            return Ok(Some((
                self.line,
                Line::Bad(format!("the line is longer than {} bytes ({skipped} bytes)", self.cap)),
            )));
        }
        while matches!(self.buf.last(), Some(b'\n' | b'\r')) {
            self.buf.pop();
        }
        let mut bytes = &self.buf[..];
        if self.line == 1 && bytes.starts_with(&[0xef, 0xbb, 0xbf]) {
            bytes = &bytes[3..];
        }
        let l = match std::str::from_utf8(bytes) {
            Ok(s) => Line::Text(s),
            Err(e) => Line::Bad(format!("not UTF-8 text: {e}")),
        };
        Ok(Some((self.line, l)))
    }
}

/// Runs `row` on every non-empty line of `r`; malformed lines and rows go through
/// [`Builder::bad`] (an error, or counted with `skip_bad_rows`).
pub(super) fn for_each_line(
    r: impl Read,
    b: &mut Builder,
    mut row: impl FnMut(&str, u64, &mut Builder) -> Result<(), TraceError>,
) -> Result<(), TraceError> {
    let mut lines = Lines::new(std::io::BufReader::with_capacity(1 << 16, r), MAX_LINE_BYTES);
    loop {
        let done = lines.line;
        let (line_no, l) = match lines.next_line() {
            Ok(None) => break,
            Ok(Some(x)) => x,
            Err(e) => return Err(stream_err(&b.trace.file, done + 1, false, &e)),
        };
        match l {
            Line::Bad(m) => {
                let e = b.err(line_no, None, m);
                b.bad(e)?;
            }
            Line::Text(t) => {
                if t.trim().is_empty() {
                    continue;
                }
                if let Err(e) = row(t, line_no, b) {
                    b.bad(e)?;
                }
            }
        }
    }
    Ok(())
}

/// A serde error with its key path as the column.
pub(super) fn json_err(b: &Builder, line: u64, e: serde_path_to_error::Error<serde_json::Error>) -> TraceError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let msg = inner.to_string();
    // serde_json appends " at line 1 column N"; the column within a JSON line is noise here.
    let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
    let column = (path != ".").then_some(path);
    b.err(line, column.as_deref(), format!("malformed JSON: {msg}"))
}

/// Parses a JSON line into `T`, with the key path of any error.
pub(super) fn parse_json<'a, T: serde::Deserialize<'a>>(
    b: &Builder,
    line: u64,
    text: &'a str,
) -> Result<T, TraceError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let v = serde_path_to_error::deserialize(&mut de).map_err(|e| json_err(b, line, e))?;
    de.end().map_err(|e| {
        b.err(
            line,
            None,
            format!(
                "malformed JSON: {}",
                e.to_string().split(" at line ").next().unwrap_or("")
            ),
        )
    })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_cap_bom_and_utf8() {
        let text = b"\xef\xbb\xbfone\r\n\ntoo long line here\nok\n\xff\xfe\n";
        let mut l = Lines::new(&text[..], 10);
        let mut got = Vec::new();
        while let Some((n, x)) = l.next_line().unwrap() {
            got.push(match x {
                Line::Text(t) => format!("{n}:{t}"),
                Line::Bad(m) => format!("{n}:bad {}", &m[..12]),
            });
        }
        assert_eq!(
            got,
            vec!["1:one", "2:", "3:bad the line is ", "4:ok", "5:bad not UTF-8 te"]
        );
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
