//! `sim load` against a misbehaving endpoint: a tiny HTTP server in the test (on loopback)
//! that answers what each test scripts (streams cut mid-event, events past the bound,
//! another content type, streams that stall), and the real binary, every wait bounded.
//! A stream counts as finished only when it ends with `data: [DONE]` (one the server cuts
//! before it is `cut`); SIGINT, SIGTERM and `--duration` write what the run has, whole, the
//! requests in flight recorded as cut.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{csv_table, sim, write};

/// What the endpoint does with a completion request.
#[derive(Clone)]
pub enum Reply {
    /// Writes these bytes (a whole HTTP response, head and body) and closes.
    Bytes(Vec<u8>),
    /// Writes these bytes and then holds the connection open, writing nothing, until the
    /// client closes it (or a minute passes).
    Stall(Vec<u8>),
}

/// An HTTP/1.1 response head with `content_type`, the body delimited by the close.
pub fn head(status: u16, content_type: &str) -> Vec<u8> {
    format!("HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\nconnection: close\r\n\r\n").into_bytes()
}

/// One streamed token's event, readable as a completions or a chat chunk.
pub fn token_event(text: &str) -> Vec<u8> {
    let v = serde_json::json!({"choices": [{"index": 0, "text": text, "delta": {"content": text}}]});
    format!("data: {v}\n\n").into_bytes()
}

/// A stream of `n` tokens then `data: [DONE]`.
pub fn good_stream(n: usize) -> Vec<u8> {
    let mut b = head(200, "text/event-stream");
    for _ in 0..n {
        b.extend(token_event("abc "));
    }
    b.extend_from_slice(b"data: [DONE]\n\n");
    b
}

/// A loopback server answering `GET /v1/models` with one model and every other request
/// with its [`Reply`]; stopped when dropped.
pub struct Endpoint {
    pub url: String,
    stop: Arc<AtomicBool>,
}

impl Endpoint {
    pub fn start(reply: Reply) -> Endpoint {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => {
                        let reply = reply.clone();
                        std::thread::spawn(move || answer(s, &reply));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Endpoint { url, stop }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Reads one request (head and `content-length` body) and answers it.
fn answer(mut s: TcpStream, reply: &Reply) {
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = Vec::new();
    let mut buf = [0u8; 65536];
    let head_end = loop {
        if let Some(i) = req.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    };
    let text = String::from_utf8_lossy(&req[..head_end]).to_ascii_lowercase();
    let len: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while req.len() < head_end + len {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
    if text.starts_with("get /v1/models") {
        let body = r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#;
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        return;
    }
    match reply {
        Reply::Bytes(b) => {
            let _ = s.write_all(b);
        }
        Reply::Stall(b) => {
            let _ = s.write_all(b);
            let _ = s.flush();
            // Until the client goes away.
            let _ = s.read(&mut buf);
        }
    }
}

/// One session of one turn: 40 prompt tokens, 5 output tokens.
pub const ONE_TURN: &str = r#"name = "one-turn"
seed = 1
[backends]
count = 1
[router.policy]
kind = "roundrobin"
[[workload.groups]]
name = "g"
sessions = 1
arrival = { kind = "burst", at_s = 0, spread_s = 0 }
input_tokens = 40
output_tokens = 5
"#;

/// `sim load` of [`ONE_TURN`] against `url` into `dir/out`, with `extra` flags, not waited
/// for.
pub fn load(dir: &Path, url: &str, extra: &[&str]) -> (Child, PathBuf) {
    let scenario = write(dir, "one-turn.toml", ONE_TURN);
    let out = dir.join("out");
    let child = Command::new(sim().get_program())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("load")
        .arg(&scenario)
        .args(["--target", url, "--quiet", "--out"])
        .arg(&out)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child, out)
}

/// Waits at most `limit` for `child`; kills it past that (failing the test).
pub fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("sim load did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

/// The single request's `outcome` and `error` in `out/requests.csv`.
fn the_request(out: &Path) -> (String, String) {
    let (head, rows) = csv_table(&out.join("requests.csv"));
    assert_eq!(rows.len(), 1, "{rows:?}");
    let col = |n: &str| rows[0][head.iter().position(|h| h == n).unwrap()].clone();
    (col("outcome"), col("error"))
}

fn summary(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn a_stream_ends_finished_only_at_done() {
    let dir = tempfile::tempdir().unwrap();
    let ep = Endpoint::start(Reply::Bytes(good_stream(5)));
    let (child, out) = load(dir.path(), &ep.url, &[]);
    let o = wait_bounded(child, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(the_request(&out).0, "finished");
    assert_eq!(summary(&out)["stopped_by"], "end");
}

#[test]
fn a_stream_cut_mid_event_is_cut_not_finished() {
    for (cut, says) in [
        (&b"data: {\"choices\":[{\"text\":\"ab"[..], "cut mid-event"),
        (&b""[..], "cut after"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut body = head(200, "text/event-stream");
        body.extend(token_event("abc "));
        body.extend_from_slice(cut);
        let ep = Endpoint::start(Reply::Bytes(body));
        let (child, out) = load(dir.path(), &ep.url, &[]);
        let o = wait_bounded(child, Duration::from_secs(60));
        assert_eq!(o.status.code(), Some(1));
        let (outcome, error) = the_request(&out);
        assert_eq!(outcome, "cut");
        assert!(error.contains(says) && error.contains("before data: [DONE]"), "{error}");
        assert_eq!(summary(&out)["stopped_by"], "end");
    }
}

#[test]
fn events_and_answers_past_their_bounds_are_named() {
    // One event of 20 MB (past the 4 MiB bound; a token event holds its text twice), one of
    // 3 MB (read whole), another content type, an error status with a 1 MiB body.
    let big = |n: usize| {
        let mut b = head(200, "text/event-stream");
        b.extend(token_event(&"x".repeat(n)));
        b.extend_from_slice(b"data: [DONE]\n\n");
        b
    };
    for (body, outcome, says) in [
        (
            big(10 << 20),
            "failed",
            "an event larger than 4194304 bytes (sim load's bound on one event)",
        ),
        (big(1_500_000), "finished", ""),
        (
            [head(200, "application/json"), b"{\"choices\":[]}".to_vec()].concat(),
            "failed",
            "expected a text/event-stream answer, got Content-Type \"application/json\"",
        ),
        (
            [head(500, "text/plain"), vec![b'e'; 1 << 20]].concat(),
            "http_error",
            "HTTP 500",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let ep = Endpoint::start(Reply::Bytes(body));
        let (child, out) = load(dir.path(), &ep.url, &[]);
        let o = wait_bounded(child, Duration::from_secs(60));
        assert!(o.status.code().is_some_and(|c| c <= 1), "{o:?}");
        let (got, error) = the_request(&out);
        assert_eq!(got, outcome, "{error}");
        assert!(error.contains(says), "{error}");
        assert!(error.len() < 300, "{error}");
    }
}

/// SIGINT and SIGTERM while a request streams (stalled mid-stream), and `--duration`
/// while a large event is half read: the run stops within a bound, writes requests.csv and
/// summary.json whole with the request cut, and says so on stderr.
#[test]
fn signals_and_duration_write_the_run_with_requests_cut() {
    let mut stalled = head(200, "text/event-stream");
    stalled.extend(token_event("abc "));
    let mut half_event = head(200, "text/event-stream");
    half_event.extend_from_slice(b"data: ");
    half_event.extend(std::iter::repeat_n(b'x', 3 << 20));
    for (how, reply) in [
        ("SIGINT", stalled.clone()),
        ("SIGTERM", stalled),
        ("--duration", half_event),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let ep = Endpoint::start(Reply::Stall(reply));
        let extra: &[&str] = if how == "--duration" { &["--duration", "2"] } else { &[] };
        let (child, out) = load(dir.path(), &ep.url, extra);
        if how != "--duration" {
            // Once the request is under way (its row exists only in memory: wait on the
            // endpoint's side for a moment).
            std::thread::sleep(Duration::from_millis(1500));
            let sig = if how == "SIGINT" { "-INT" } else { "-TERM" };
            assert!(
                Command::new("kill")
                    .args([sig, &child.id().to_string()])
                    .status()
                    .unwrap()
                    .success()
            );
        }
        let o = wait_bounded(child, Duration::from_secs(30));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{how}: {err}");
        assert!(
            err.contains(&format!("stopped by {how}")) && err.contains("1 in flight, recorded as cut"),
            "{err}"
        );
        let (outcome, error) = the_request(&out);
        assert_eq!(outcome, "cut", "{how}");
        assert!(error.contains(how), "{error}");
        let s = summary(&out);
        assert_eq!(s["stopped_by"], how);
        assert_eq!(s["requests"]["cut"], 1);
    }
}
