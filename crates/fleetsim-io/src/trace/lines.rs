//! Input hygiene shared by every trace reader: a byte stream with a line-length cap and the
//! UTF-8 byte-order mark removed ([`Capped`]), a line reader on top of it ([`Lines`]), and
//! the strict CSV header and row-width checks ([`check_header`], [`check_width`]).
//!
//! Every reader, of every format, reads its lines through these (the CSV readers through
//! [`Capped`] under the `csv` crate, the JSON-lines readers through [`Lines`]): none buffers
//! an unbounded line (an endless input without a newline is one error at the cap, naming
//! the line, never an allocation abort or an endless loop), none sees a BOM, and none reads
//! a row shifted under the wrong column.

use std::io::{self, BufRead, BufReader, Read};

use super::model::{TraceError, stream_err};

/// Longest line a trace may hold (a Mooncake row of 100k prompt blocks is ~1 MiB).
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// A [`Read`] that drops a leading UTF-8 BOM and fails once a line exceeds `cap` bytes.
pub struct Capped<R> {
    inner: R,
    cap: usize,
    /// Bytes since the last newline.
    run: usize,
    /// 1-based line being read.
    line: u64,
    /// Bytes of a possible BOM still to check at the start.
    start: bool,
    /// Bytes read but held back while checking for the BOM.
    held: Vec<u8>,
}

impl<R: Read> Capped<R> {
    /// Wraps `inner` with the default cap [`MAX_LINE_BYTES`].
    pub fn new(inner: R) -> Self {
        Capped::with_cap(inner, MAX_LINE_BYTES)
    }

    /// Wraps `inner` with a line cap of `cap` bytes.
    pub fn with_cap(inner: R, cap: usize) -> Self {
        Capped {
            inner,
            cap,
            run: 0,
            line: 1,
            start: true,
            held: Vec::new(),
        }
    }

    fn fill_start(&mut self) -> io::Result<()> {
        // Read up to 3 bytes (short reads included) and drop them if they are the BOM.
        while self.held.len() < 3 {
            let mut b = [0u8; 3];
            let n = self.inner.read(&mut b[..3 - self.held.len()])?;
            if n == 0 {
                break;
            }
            self.held.extend_from_slice(&b[..n]);
            if !b"\xef\xbb\xbf".starts_with(&self.held) {
                break;
            }
        }
        if self.held == b"\xef\xbb\xbf" {
            self.held.clear();
        }
        self.start = false;
        Ok(())
    }
}

/// The message of a line-cap error, for callers that map I/O errors to their own.
pub fn is_line_cap(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::InvalidData && e.to_string().contains("longer than")
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.start {
            self.fill_start()?;
        }
        let n = if !self.held.is_empty() {
            let n = self.held.len().min(buf.len());
            buf[..n].copy_from_slice(&self.held[..n]);
            self.held.drain(..n);
            n
        } else {
            self.inner.read(buf)?
        };
        for &c in &buf[..n] {
            if c == b'\n' {
                self.run = 0;
                self.line += 1;
            } else {
                self.run += 1;
                if self.run > self.cap {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "line {} is longer than {} MiB, the longest line a trace of this format may hold",
                            self.line,
                            self.cap >> 20
                        ),
                    ));
                }
            }
        }
        Ok(n)
    }
}

/// Lines of a capped, BOM-free stream, each with its 1-based number. Invalid UTF-8 is an
/// error naming the line.
pub struct Lines<R: Read> {
    r: BufReader<Capped<R>>,
    buf: Vec<u8>,
    n: u64,
    file: String,
}

impl<R: Read> Lines<R> {
    /// Lines of `r`; `file` names it in errors.
    pub fn new(r: R, file: &str) -> Self {
        Lines::with_cap(r, file, MAX_LINE_BYTES)
    }

    /// Lines of `r` capped at `cap` bytes.
    pub fn with_cap(r: R, file: &str, cap: usize) -> Self {
        Lines {
            r: BufReader::with_capacity(1 << 16, Capped::with_cap(r, cap)),
            buf: Vec::new(),
            n: 0,
            file: file.to_string(),
        }
    }

    /// Number of the line last returned (0 before the first).
    pub fn line(&self) -> u64 {
        self.n
    }

    /// The next line (without its end of line) and its number, or `None` at the end. A line
    /// that is not UTF-8 is an inner error (a bad row, which `skip_bad_rows` may skip); a
    /// read error or a line beyond the cap is an outer one (the read cannot go on).
    #[allow(clippy::type_complexity)]
    pub fn next_line(&mut self) -> Result<Option<(u64, Result<&str, TraceError>)>, TraceError> {
        self.buf.clear();
        let next = self.n + 1;
        let got = self
            .r
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| read_error(&self.file, next, e))?;
        if got == 0 {
            return Ok(None);
        }
        self.n += 1;
        let n = self.n;
        while matches!(self.buf.last(), Some(b'\n' | b'\r')) {
            self.buf.pop();
        }
        let s = std::str::from_utf8(&self.buf).map_err(|e| TraceError {
            file: self.file.clone(),
            line: Some(n),
            column: None,
            message: format!("not UTF-8 (byte {})", e.valid_up_to() + 1),
        });
        Ok(Some((n, s)))
    }
}

/// A read error as a trace error; a line-cap error names the line.
pub fn io_error(file: &str, e: io::Error) -> TraceError {
    TraceError {
        file: file.to_string(),
        line: None,
        column: None,
        message: if is_line_cap(&e) {
            e.to_string()
        } else {
            format!("cannot read the trace: {e}")
        },
    }
}

/// An error of the stream while reading line `line`: the line cap (naming the line), else
/// a corrupt or truncated gzip member or an I/O error (see [`stream_err`]).
pub fn read_error(file: &str, line: u64, e: io::Error) -> TraceError {
    if is_line_cap(&e) {
        io_error(file, e)
    } else {
        stream_err(file, line, false, &e)
    }
}

/// Checks a CSV header: no empty, duplicate (case-insensitive) or unknown column. `known`
/// lists every column the format defines (required ones included); `None` accepts any
/// extra column (formats whose exports add columns freely).
pub fn check_header(header: &[String], known: Option<&[&str]>, file: &str) -> Result<(), TraceError> {
    let err = |column: Option<&str>, message: String| TraceError {
        file: file.to_string(),
        line: Some(1),
        column: column.map(str::to_string),
        message,
    };
    for (i, h) in header.iter().enumerate() {
        if h.is_empty() {
            return Err(err(
                None,
                format!("header column {} is empty (has: {})", i + 1, header.join(", ")),
            ));
        }
        if header[..i].iter().any(|x| x.eq_ignore_ascii_case(h)) {
            return Err(err(Some(h), "appears twice in the header".into()));
        }
        let unknown = known.filter(|k| !k.iter().any(|x| x.eq_ignore_ascii_case(h)));
        if let Some(k) = unknown {
            let hint = k
                .iter()
                .min_by_key(|x| strsim_distance(&x.to_ascii_lowercase(), &h.to_ascii_lowercase()))
                .map(|x| format!("; did you mean `{x}`?"))
                .unwrap_or_default();
            return Err(err(
                Some(h),
                format!("unknown column (this format has: {}){hint}", k.join(", ")),
            ));
        }
    }
    Ok(())
}

/// Checks that a row has exactly as many fields as the header.
pub fn check_width(fields: usize, header: usize, file: &str, line: u64) -> Result<(), TraceError> {
    if fields == header {
        return Ok(());
    }
    Err(TraceError {
        file: file.to_string(),
        line: Some(line),
        column: None,
        message: format!(
            "the row has {fields} fields but the header has {header} (a row {} than the header would be read shifted)",
            if fields < header { "shorter" } else { "longer" }
        ),
    })
}

/// Edit distance, for "did you mean" hints on short column names.
fn strsim_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push((prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(r: impl Read) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut c = Capped::with_cap(r, 8);
        c.read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn strips_only_a_leading_bom() {
        assert_eq!(all(&b"\xef\xbb\xbfab\n"[..]).unwrap(), b"ab\n");
        assert_eq!(all(&b"ab\xef\xbb\xbf\n"[..]).unwrap(), b"ab\xef\xbb\xbf\n");
        assert_eq!(all(&b"\xef\xbb"[..]).unwrap(), b"\xef\xbb");
        assert_eq!(all(&b""[..]).unwrap(), b"");
        // Byte by byte (short reads) too.
        let one = io::Cursor::new(b"\xef\xbb\xbfxy".to_vec()).take(5);
        assert_eq!(all(one).unwrap(), b"xy");
    }

    #[test]
    fn caps_a_long_line_and_names_it() {
        assert_eq!(all(&b"12345678\n12345678\n"[..]).unwrap().len(), 18);
        let e = all(&b"ok\n123456789\n"[..]).unwrap_err();
        assert!(is_line_cap(&e), "{e}");
        assert!(e.to_string().starts_with("line 2 is longer than"), "{e}");
        // An endless input without a newline stops at the cap.
        let e = all(io::repeat(b'x')).unwrap_err();
        assert!(is_line_cap(&e));
    }

    #[test]
    fn lines_number_strip_and_refuse_bad_utf8() {
        let mut l = Lines::new(&b"\xef\xbb\xbfa\r\n\nb"[..], "f");
        assert_eq!(l.next_line().unwrap(), Some((1, Ok("a"))));
        assert_eq!(l.next_line().unwrap(), Some((2, Ok(""))));
        assert_eq!(l.next_line().unwrap(), Some((3, Ok("b"))));
        assert_eq!(l.next_line().unwrap(), None);
        let mut l = Lines::new(&b"a\n\xff\nc\n"[..], "f");
        l.next_line().unwrap();
        let e = l.next_line().unwrap().unwrap().1.unwrap_err();
        assert_eq!(e.to_string(), "f:2: not UTF-8 (byte 1)");
        assert_eq!(l.next_line().unwrap(), Some((3, Ok("c"))));
        let mut l = Lines::with_cap(io::repeat(b'{'), "f", 1 << 20);
        let e = l.next_line().unwrap_err();
        assert!(e.to_string().starts_with("f: line 1 is longer than 1 MiB"), "{e}");
    }

    #[test]
    fn header_checks() {
        let h = |s: &str| s.split(',').map(str::to_string).collect::<Vec<_>>();
        let known: &[&str] = &["arrival_s", "session_id", "input_tokens"];
        assert!(check_header(&h("arrival_s,input_tokens"), Some(known), "f").is_ok());
        let e = check_header(&h("arrival_s,,input_tokens"), Some(known), "f").unwrap_err();
        assert!(e.to_string().starts_with("f:1: header column 2 is empty"), "{e}");
        let e = check_header(&h("arrival_s,input_tokens,Arrival_s"), Some(known), "f").unwrap_err();
        assert_eq!(e.to_string(), "f:1: column `Arrival_s`: appears twice in the header");
        let e = check_header(&h("arrival_s,sesion_id,input_tokens"), Some(known), "f").unwrap_err();
        assert!(e.to_string().ends_with("did you mean `session_id`?"), "{e}");
        assert!(check_header(&h("a,b"), None, "f").is_ok());
        assert!(check_width(3, 3, "f", 2).is_ok());
        let e = check_width(2, 3, "f", 7).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("f:7: the row has 2 fields but the header has 3"),
            "{e}"
        );
    }
}
