//! A reader of server-sent events (the `text/event-stream` of a streamed completion), fed
//! the body chunk by chunk as it arrives: each byte is looked at once (linear time whatever
//! the chunking, where re-scanning a growing buffer is quadratic in an event's size), and
//! one event and the whole response are bounded, the bound named in the error.
//!
//! Lines end with `\n` (a `\r` before it is dropped). A `data:` line adds its value (one
//! leading space dropped) to the event's data, lines joined by `\n`; a blank line ends the
//! event; comments (`:`) and the other fields (`event`, `id`, `retry`) are skipped, as the
//! HTML standard's event-stream interpretation says for a client that reads only data.

use std::fmt;

/// The most bytes one event may take (its lines, with their ends).
pub const MAX_EVENT_BYTES: usize = 4 << 20;
/// The most bytes one response may take.
pub const MAX_RESPONSE_BYTES: u64 = 256 << 20;

/// Why a stream was given up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseError {
    /// One event passed [`MAX_EVENT_BYTES`] (or the reader's own bound).
    EventTooLarge(usize),
    /// The response passed [`MAX_RESPONSE_BYTES`] (or the reader's own bound).
    ResponseTooLarge(u64),
    /// An event's data is not UTF-8.
    NotUtf8,
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::EventTooLarge(n) => write!(f, "an event larger than {n} bytes (sim load's bound on one event)"),
            SseError::ResponseTooLarge(n) => {
                write!(f, "a response larger than {n} bytes (sim load's bound on one response)")
            }
            SseError::NotUtf8 => write!(f, "an event whose data is not UTF-8"),
        }
    }
}

/// The reader's state between chunks.
#[derive(Debug)]
pub struct SseReader {
    /// The bytes of the line not yet ended.
    line: Vec<u8>,
    /// The data of the event so far (lines joined by `\n`).
    data: Vec<u8>,
    /// A `data:` line has been read in this event.
    has_data: bool,
    /// Bytes of this event so far.
    event_bytes: usize,
    /// Bytes of the response so far.
    total: u64,
    /// Bytes looked at or copied so far ([`SseReader::work`]).
    work: u64,
    max_event: usize,
    max_total: u64,
}

impl Default for SseReader {
    fn default() -> Self {
        SseReader::new(MAX_EVENT_BYTES, MAX_RESPONSE_BYTES)
    }
}

impl SseReader {
    /// A reader refusing an event past `max_event` bytes and a response past `max_total`.
    pub fn new(max_event: usize, max_total: u64) -> SseReader {
        SseReader {
            line: Vec::new(),
            data: Vec::new(),
            has_data: false,
            event_bytes: 0,
            total: 0,
            work: 0,
            max_event,
            max_total,
        }
    }

    /// Reads `chunk`, calling `on_event` with each event's data as it completes; stops
    /// early (returning `Ok(true)`) when `on_event` returns true.
    pub fn feed(&mut self, chunk: &[u8], mut on_event: impl FnMut(&str) -> bool) -> Result<bool, SseError> {
        self.total += chunk.len() as u64;
        if self.total > self.max_total {
            return Err(SseError::ResponseTooLarge(self.max_total));
        }
        let mut rest = chunk;
        while !rest.is_empty() {
            let (piece, ended) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            rest = &rest[piece.len() + usize::from(ended)..];
            self.work += (piece.len() + usize::from(ended)) as u64;
            self.event_bytes += piece.len() + usize::from(ended);
            if self.event_bytes > self.max_event {
                return Err(SseError::EventTooLarge(self.max_event));
            }
            if !ended {
                self.work += piece.len() as u64;
                self.line.extend_from_slice(piece);
                break;
            }
            let stop = if self.line.is_empty() {
                self.line_ended(piece, &mut on_event)?
            } else {
                let mut line = std::mem::take(&mut self.line);
                self.work += piece.len() as u64;
                line.extend_from_slice(piece);
                let stop = self.line_ended(&line, &mut on_event)?;
                line.clear();
                self.line = line;
                stop
            };
            if stop {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// One whole line (without its `\n`).
    fn line_ended(&mut self, line: &[u8], on_event: &mut impl FnMut(&str) -> bool) -> Result<bool, SseError> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            self.event_bytes = 0;
            if !std::mem::take(&mut self.has_data) {
                return Ok(false);
            }
            let data = std::mem::take(&mut self.data);
            // UTF-8 validation reads the data once more.
            self.work += data.len() as u64;
            let stop = on_event(std::str::from_utf8(&data).map_err(|_| SseError::NotUtf8)?);
            self.data = data;
            self.data.clear();
            return Ok(stop);
        }
        if let Some(value) = line.strip_prefix(b"data") {
            let value = match value {
                [] => value,
                [b':', b' ', v @ ..] | [b':', v @ ..] => v,
                // `dataX:` is another field.
                _ => return Ok(false),
            };
            if self.has_data {
                self.data.push(b'\n');
            }
            self.work += value.len() as u64;
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        Ok(false)
    }

    /// Whether the body ended inside an event (a line or an event begun and not ended):
    /// the stream was cut.
    pub fn mid_event(&self) -> bool {
        !self.line.is_empty() || self.has_data
    }

    /// Bytes read.
    pub fn bytes(&self) -> u64 {
        self.total
    }

    /// Bytes looked at or copied so far (searched for a line end, appended to a line or an
    /// event's data, checked as UTF-8): the reader's work, a few times [`Self::bytes`]
    /// whatever the chunking, where re-scanning a growing buffer grows with its square.
    pub fn work(&self) -> u64 {
        self.work
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> (Vec<String>, bool) {
        let mut r = SseReader::default();
        let mut out = Vec::new();
        for c in chunks {
            r.feed(c, |d| {
                out.push(d.to_string());
                false
            })
            .unwrap();
        }
        (out, r.mid_event())
    }

    #[test]
    fn reads_events_whatever_the_chunking() {
        let body = b"data: {\"a\":1}\n\n: comment\nevent: x\ndata:two\ndata: lines\r\n\r\ndata: [DONE]\n\n";
        let want = vec!["{\"a\":1}".to_string(), "two\nlines".into(), "[DONE]".into()];
        assert_eq!(events(&[body]), (want.clone(), false));
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(events(&bytes), (want.clone(), false));
        for cut in 1..body.len() {
            assert_eq!(events(&[&body[..cut], &body[cut..]]).0, want, "cut at {cut}");
        }
        // Cut inside a line, and after a data line without its blank line.
        assert_eq!(
            events(&[b"data: {\"a\":1}\n\ndata: {\"b\""]),
            (vec!["{\"a\":1}".into()], true)
        );
        assert_eq!(events(&[b"data: x\n"]), (vec![], true));
        assert!(!events(&[b": keep-alive\n\n"]).1);
    }

    #[test]
    fn stops_when_asked_and_bounds_events_and_responses() {
        let mut r = SseReader::default();
        let mut n = 0;
        let stopped = r
            .feed(b"data: 1\n\ndata: [DONE]\n\ndata: 3\n\n", |d| {
                n += 1;
                d == "[DONE]"
            })
            .unwrap();
        assert!(stopped && n == 2);
        let mut r = SseReader::new(16, 1 << 20);
        assert_eq!(
            r.feed(b"data: 0123456789abcdef", |_| false),
            Err(SseError::EventTooLarge(16))
        );
        let mut r = SseReader::new(16, 1 << 20);
        // 15 bytes of line and 1 of blank line: at the bound, read.
        assert_eq!(r.feed(b"data: 01234567\n\n", |_| false), Ok(false));
        let mut r = SseReader::new(1 << 20, 32);
        r.feed(&[b'x'; 32], |_| false).unwrap();
        let e = r.feed(b"x", |_| false).unwrap_err();
        assert_eq!(e, SseError::ResponseTooLarge(32));
        assert!(e.to_string().contains("larger than 32 bytes"), "{e}");
    }

    /// The work of reading one event of `n` bytes fed in 1 KiB chunks.
    fn work_of_one_event(n: usize) -> u64 {
        let mut body = b"data: ".to_vec();
        body.extend(std::iter::repeat_n(b'x', n));
        body.extend_from_slice(b"\n\n");
        let mut r = SseReader::new(32 << 20, 1 << 30);
        let mut got = 0;
        for c in body.chunks(1024) {
            r.feed(c, |d| {
                got = d.len();
                false
            })
            .unwrap();
        }
        assert_eq!(got, n);
        assert_eq!(r.bytes(), body.len() as u64);
        r.work()
    }

    /// Ten megabytes in one event, fed in 1 KiB chunks, read in linear time: the work is at
    /// most five passes over the bytes, and doubling the event doubles it (a reader that
    /// re-scans its buffer per chunk would do about 5,000 passes, and quadruple).
    #[test]
    fn a_large_event_is_read_in_linear_time() {
        let n = 10 << 20;
        let (w1, w2) = (work_of_one_event(n / 2), work_of_one_event(n));
        assert!(w2 <= 5 * n as u64, "{w2} for {n} bytes");
        let ratio = w2 as f64 / w1 as f64;
        assert!(
            (1.9..=2.1).contains(&ratio),
            "doubling the event multiplied the work by {ratio}"
        );
    }
}
