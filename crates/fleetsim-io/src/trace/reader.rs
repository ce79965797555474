//! Opening a trace and dispatching it to its format's reader: gzip detection, format
//! detection from the first line, and the options of the agent-trace readers.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use super::lines::io_error;
use super::model::{Builder, FORMAT_NAMES, Format, Trace, TraceError, stream_err};
use super::session_log::ColumnMap;
use super::{dynamo, otel, requests, session_log};

/// Reader options.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadOptions {
    /// Format; detected from the first line when `None`.
    pub format: Option<Format>,
    /// Count and report malformed rows instead of failing.
    pub skip_bad_rows: bool,
}

/// Options of the agent-trace readers (from `[[workload.traces]]` or the command line).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentReadOptions {
    /// `sessions` format: which column holds what.
    pub columns: Option<ColumnMap>,
    /// `otel`: span attributes naming the session, tried in order before the trace id.
    pub session_attributes: Vec<String>,
    /// `sessions` format: the `where` row filter (every condition must hold).
    pub filter: Vec<super::filter::RowFilter>,
}

fn open_file(path: &Path) -> Result<File, TraceError> {
    File::open(path).map_err(|e| TraceError {
        file: path.display().to_string(),
        line: None,
        column: None,
        message: format!("cannot read the trace: {e}"),
    })
}

/// A file read that hands every byte it reads, as stored on disk (compressed or not), to
/// `sink`: the bytes pass once, for the parser and for a fingerprint together.
struct Tee<'a> {
    file: &'a File,
    sink: &'a mut dyn FnMut(&[u8]),
}

impl Read for Tee<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        (self.sink)(&buf[..n]);
        Ok(n)
    }
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
    detected(open_file(path)?, &path.display().to_string(), format)
}

/// [`open_detected`] on an open file (`file` names it in messages).
fn detected<'a>(
    raw: impl Read + 'a,
    file: &str,
    format: Option<Format>,
) -> Result<(Box<dyn BufRead + 'a>, Format), TraceError> {
    let file = file.to_string();
    let mut raw = BufReader::with_capacity(1 << 16, raw);
    let gzip = raw
        .fill_buf()
        .map_err(|e| io_error(&file, e))?
        .starts_with(&[0x1f, 0x8b]);
    let mut r: Box<dyn BufRead + 'a> = if gzip {
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
            let buf = r.fill_buf().map_err(|e| stream_err(&file, 1, gzip, &e))?;
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
        Format::Mooncake => requests::read_mooncake(r, &mut b)?,
        Format::Native => requests::read_native(r, &mut b)?,
        Format::Azure => requests::read_azure(r, &mut b)?,
        Format::BurstGpt => requests::read_burstgpt(r, &mut b)?,
        Format::Dynamo => dynamo::read(r, &mut b)?,
        Format::Otel => otel::read(r, &mut b, &otel::OtelOptions::default())?,
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

/// Reads a trace of any format; `agent` configures the session-shaped readers.
pub fn read_with(path: &Path, opts: ReadOptions, agent: &AgentReadOptions) -> Result<Trace, TraceError> {
    let file = path.display().to_string();
    let format = match (opts.format, &agent.columns) {
        (None, Some(_)) => Some(Format::Sessions),
        (f, _) => f,
    };
    let (r, format) = open_detected(path, format)?;
    read_any(r, &file, format, opts.skip_bad_rows, agent)
}

/// [`read_with`] that also hands every byte of the file, as stored on disk (gzip or not),
/// to `sink`, in order and to the end whether the parse succeeds or not: the parse and a
/// fingerprint of the file share one read. A file that cannot be opened feeds nothing.
pub fn read_with_sink(
    path: &Path,
    opts: ReadOptions,
    agent: &AgentReadOptions,
    sink: &mut dyn FnMut(&[u8]),
) -> Result<Trace, TraceError> {
    let name = path.display().to_string();
    let format = match (opts.format, &agent.columns) {
        (None, Some(_)) => Some(Format::Sessions),
        (f, _) => f,
    };
    let f = open_file(path)?;
    let parsed = detected(
        Tee {
            file: &f,
            sink: &mut *sink,
        },
        &name,
        format,
    )
    .and_then(|(r, format)| read_any(r, &name, format, opts.skip_bad_rows, agent));
    // What the parse left unread (after an error, a gzip trailer): the fingerprint is of
    // the whole file.
    let _ = std::io::copy(&mut Tee { file: &f, sink }, &mut std::io::sink());
    parsed
}

/// [`read_with`] from any reader of a known format.
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
            otel::read(r, &mut b, &otel::OtelOptions::new(&agent.session_attributes))?;
            Ok(b.trace)
        }
        Format::Sessions => {
            let Some(cols) = &agent.columns else {
                return read_from(r, file, format, skip);
            };
            let mut b = Builder::new(file, format, skip);
            session_log::read(r, &mut b, cols, &agent.filter)?;
            Ok(b.trace)
        }
        f => read_from(r, file, f, skip),
    }
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
                ColumnMap::from_toml(
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
}
