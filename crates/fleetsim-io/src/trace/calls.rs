//! What session-shaped traces record beyond arrival and tokens: per call its recorded end,
//! TTFT, think time and model; the tool time between calls; and the reader options and line
//! reader the agent-trace readers (`dynamo`, `otel`, `sessions`) share.
//!
//! Every line is read through the shared [`Lines`] of every trace reader: a byte order
//! mark on the first line is dropped, a line longer than [`MAX_LINE_BYTES`] stops the read
//! with one error naming the line (never an allocation of gigabytes, never an endless loop
//! discarding the rest of an endless line), invalid UTF-8 is a malformed row, and a
//! corrupt or truncated gzip stream is an error naming the line being read.

use std::io::Read;
use std::path::Path;

use super::lines::Lines;
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
        if let Some(&i) = self.model_ids.get(m) {
            return i;
        }
        let i = self.models.len() as u32;
        self.models.push(m.to_string());
        self.model_ids.insert(m.to_string(), i);
        i
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
    blocks: &[u64],
    timing: Timing<'_>,
) -> Result<(), TraceError> {
    let before = b.trace.rows.len();
    b.push(line, t_ns, input, output, session, turn, blocks)?;
    if b.trace.rows.len() > before {
        // end, TTFT, think (8 bytes each) and the model index (4), plus a new model's name.
        let new_name = timing
            .model
            .filter(|m| !m.is_empty() && !calls.model_ids.contains_key(*m))
            .map_or(0, |m| 2 * (m.len() as u64 + 32));
        b.charge(line, 28 + new_name)?;
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

/// Runs `row` on every non-empty line of `r`; malformed lines and rows go through
/// [`Builder::bad`] (an error, or counted with `skip_bad_rows`).
pub(super) fn for_each_line(
    r: impl Read,
    b: &mut Builder,
    mut row: impl FnMut(&str, u64, &mut Builder) -> Result<(), TraceError>,
) -> Result<(), TraceError> {
    let file = b.trace.file.clone();
    let mut lines = Lines::with_cap(r, &file, MAX_LINE_BYTES);
    while let Some((line_no, l)) = lines.next_line()? {
        match l {
            Err(e) => b.bad(e)?,
            Ok(t) => {
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

/// A JSON object read into `T`. serde's derived structs also accept an array of their
/// fields in order (`"tool": [1]` would be read as `duration_ms = 1`, a JSON array as a
/// whole event); no trace writes one, so every record and nested record of the JSON
/// readers is read through this, and anything but an object is an error naming its key.
#[derive(Debug)]
pub(super) struct Obj<T>(pub T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Obj<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for V<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(m))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData)).map(Obj)
    }
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
    fn an_endless_line_stops_every_agent_reader_at_the_cap() {
        // An over-long line discarded chunk by chunk never ends when the line is endless
        // (`/dev/zero`); the shared reader stops at the cap.
        for f in [Format::Dynamo, Format::Otel] {
            let e = read_any(std::io::repeat(b'{'), "z", f, true, &AgentReadOptions::default()).unwrap_err();
            assert!(e.to_string().starts_with("z: line 1 is longer than 64 MiB"), "{e}");
        }
        let cols = AgentReadOptions {
            columns: Some(
                crate::trace::session_log::ColumnMap::from_toml(
                    &toml::from_str::<toml::Table>("c = { input_tokens = \"i\", output_tokens = \"o\", turn = \"t\" }")
                        .unwrap()["c"],
                )
                .unwrap(),
            ),
            ..AgentReadOptions::default()
        };
        let e = read_any(std::io::repeat(b'{'), "z", Format::Sessions, true, &cols).unwrap_err();
        assert!(e.to_string().contains("line 1 is longer than 64 MiB"), "{e}");
        let e = read_any(std::io::repeat(b'x'), "z", Format::Sessions, true, &cols).unwrap_err();
        assert!(e.to_string().contains("line 1 is longer than 64 MiB"), "{e}");
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
