//! Readers of request-level traces: the native CSV, Mooncake JSONL, Azure LLM 2023 CSV
//! and BurstGPT CSV. Each reader turns rows into compact [`TraceRow`](super::model::TraceRow)s (no strings kept per
//! row: session ids are interned, block hash ids are remapped to dense `u32`s stored in one
//! arena). A malformed row is an error naming the file, the line and the column; with
//! `skip_bad_rows` it is counted and reported instead (nothing is dropped silently).

use std::io::Read;

use serde::Deserialize;

use super::lines::{Capped, Lines, check_header, check_width, io_error};
use super::model::{Builder, RawRow, TraceError};

#[derive(Deserialize)]
struct MooncakeRow {
    timestamp: f64,
    input_length: u64,
    output_length: u64,
    #[serde(default)]
    hash_ids: Vec<u64>,
}

/// Milliseconds to ns: the range every reader shares ([`super::model::ms_ns`]; 1e15 ms,
/// the bound before, was clamped to 2^64 ns without a word).
fn ms_to_ns(ms: f64) -> Option<u64> {
    super::model::ms_ns(ms)
}

/// Seconds of a timestamp to ns, through the one checked conversion.
fn secs_to_ns(s: f64) -> Option<u64> {
    fleetsim_core::time::checked_to_ns(s, 1e9, fleetsim_core::time::MAX_TIMESTAMP_NS).ok()
}

pub(super) fn read_mooncake(r: impl Read, b: &mut Builder) -> Result<(), TraceError> {
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
        let row: MooncakeRow = match serde_json::from_str::<super::jsonl::Obj<MooncakeRow>>(l) {
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
        b.push(RawRow {
            blocks: &row.hash_ids,
            ..RawRow::new(n, t, row.input_length, row.output_length)
        })?;
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

pub(super) fn read_native(r: impl Read, b: &mut Builder) -> Result<(), TraceError> {
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
        b.push(RawRow {
            session: sid,
            turn: tn,
            blocks: &ids,
            ..RawRow::new(line, t, i, o)
        })
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

pub(super) fn read_azure(r: impl Read, b: &mut Builder) -> Result<(), TraceError> {
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
        b.push(RawRow::new(line, t, i, o))
    })
}

pub(super) fn read_burstgpt(r: impl Read, b: &mut Builder) -> Result<(), TraceError> {
    let mut c = Csv::new(r, &b.trace.file, None)?;
    let file = b.trace.file.clone();
    let ts = c.col("Timestamp", &file)?;
    let req = c.col("Request tokens", &file)?;
    let resp = c.col("Response tokens", &file)?;
    csv_loop(&mut c, b, |rec, line, b| {
        let t = float_secs(rec, ts, "Timestamp", b, line)?;
        let i = int(rec, req, "Request tokens", b, line)?;
        let o = int(rec, resp, "Response tokens", b, line)?;
        b.push(RawRow::new(line, t, i, o))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::model::{Format, Trace};
    use crate::trace::reader::{detect, read_from};

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
        assert_eq!(t.rows[1].session, crate::trace::model::NO_SESSION);
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
    fn more_block_ids_than_prompt_tokens_is_a_bad_row() {
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
