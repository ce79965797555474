//! The line loop and JSON decoding the JSON-lines readers (`mooncake`, `dynamo`, `otel`,
//! `sessions`) share.
//!
//! Every line is read through the shared [`Lines`] of every trace reader: a byte order
//! mark on the first line is dropped, a line longer than [`MAX_LINE_BYTES`] stops the read
//! with one error naming the line (never an allocation of gigabytes, never an endless loop
//! discarding the rest of an endless line), invalid UTF-8 is a malformed row, and a
//! corrupt or truncated gzip stream is an error naming the line being read.

use std::io::Read;

use super::lines::Lines;
use super::model::{Builder, TraceError};

/// Longest line an agent-trace reader accepts (64 MiB: a Dynamo event for a 1M-token
/// prompt is about 1.3 MB; an OTel export batch a few MB).
pub const MAX_LINE_BYTES: usize = 64 << 20;

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
